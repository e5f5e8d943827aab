"""Training job entrypoints run inside Kubeflow PyTorchJobs.

* :mod:`sarl_jobs.verl_trainer` — verl 0.9.1 (FSDP2, vLLM rollouts): PPO, GRPO, RLOO.
* :mod:`sarl_jobs.trl_trainer` — TRL 1.x with accelerate FSDP2: GRPO, RLOO.

Each is an importable ``main(cfg_path)``; the pure pieces (:mod:`sarl.integrations.verl.config`,
:mod:`sarl_jobs.cluster`, :mod:`sarl_jobs.data`) import no trainer and are unit tested.
"""
