"""Step embedders behind one interface (:class:`sarl.embedding.base.Embedder`).

SARL v1 A.1's Implementation B, a separate text-embedding model on each step string: a local
sentence-transformers model (``local``, needs the ``[embed]`` extra) or an OpenAI-compatible
``/v1/embeddings`` client (``openai_client``). Its Implementation A, mean-pooled causal-LM hidden
states at one layer (``hidden_states``): the policy being trained, over the tokens it sampled
(``policy``, bound by the trainer integration; step boundaries in tokens from ``spans``), and,
with the same pooling, any local Hugging Face causal LM on step strings (``hf_causal``).
``factory.make_embedder`` builds one from CLI/config settings. torch is imported only inside the
model-backed embedders, never at import time.
"""
