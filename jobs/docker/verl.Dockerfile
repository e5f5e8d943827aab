# sarl verl trainer image (operator default SARL_TRAINER_IMAGE): verl 0.9.1 + vLLM rollouts on
# CUDA, the sarl sdk and the job entrypoints (`python -m sarl_jobs.verl_trainer`, and
# `python -m sarl_jobs.evaluate` for the evaluation Job). Build from the repository root:
#   docker build -f jobs/docker/verl.Dockerfile -t sarl-verl .
# The base is verl's own CUDA + vLLM image (pick the tag matching your driver); verl is then pinned
# to the version sarl's overrides are tested against. Not built in CI (no GPU, no Docker engine).
ARG BASE_IMAGE=verlai/verl:vllm017.latest
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
# verl 0.9.1 needs transformers < 5.11 (sarl[verl] pins it); the base image's torch and vLLM stay.
RUN pip install "verl==0.9.1" "./sdk[verl,local,math]" "./jobs[verl]"

# Ray (rank 0 head, other ranks workers) and the trainer run as this user.
RUN useradd --create-home --uid 10001 sarl
USER 10001
ENTRYPOINT ["python", "-m"]
CMD ["sarl_jobs.verl_trainer", "/etc/sarl/experiment.yaml"]
