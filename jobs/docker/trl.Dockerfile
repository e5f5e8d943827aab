# sarl TRL trainer image (operator SARL_TRL_TRAINER_IMAGE, `spec.resources.backend: trl`): TRL 1.x
# with accelerate FSDP2, the sarl sdk and the job entrypoints (`python -m sarl_jobs.trl_trainer`,
# `python -m sarl_jobs.evaluate`). A separate image from verl's: their pins conflict. Build from
# the repository root:
#   docker build -f jobs/docker/trl.Dockerfile -t sarl-trl .
# Not built in CI (no GPU, no Docker engine).
# No vLLM here: the job then generates with transformers and says so in its log
# (sarl.integrations.trl_cluster.generation_overrides); an image with vLLM gets colocate mode.
# TRL 1.16's `vllm` extra allows vllm>=0.22.0,<=0.31.0, and vLLM wheels pin torch exactly
# (vLLM 0.24.0: torch 2.11.0, see verl.Dockerfile.base.txt), not this base's torch 2.9.1: adding
# it means a vLLM base image, re-resolved with `make check-images` and built on a GPU host.
ARG BASE_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/sarl
COPY sdk/pyproject.toml sdk/README.md sdk/
COPY sdk/src sdk/src
COPY jobs/pyproject.toml jobs/README.md jobs/
COPY jobs/src jobs/src
# The embedder extra lets structure rewards run in-process when no embedding service is given.
RUN pip install "./sdk[trl,local,math,embed]" "./jobs[trl]"

# A numeric user and group (10001) the pods name in their securityContext (runAsNonRoot needs a
# numeric user: sarl_operator.pod_security.SARL_UID, the charts' runAsUser).
RUN groupadd --gid 10001 sarl && useradd --create-home --uid 10001 --gid 10001 sarl
USER 10001:10001
ENTRYPOINT ["python", "-m"]
CMD ["sarl_jobs.trl_trainer", "/etc/sarl/experiment.yaml"]
