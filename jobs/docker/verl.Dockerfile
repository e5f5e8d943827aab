# sarl verl trainer image (operator default SARL_TRAINER_IMAGE): verl 0.9.1 + vLLM rollouts on
# CUDA, the sarl sdk and the job entrypoints (`python -m sarl_jobs.verl_trainer`, and
# `python -m sarl_jobs.evaluate` for the evaluation Job). Build from the repository root:
#   docker build -f jobs/docker/verl.Dockerfile -t sarl-verl .
# The base is verl's own CUDA 13 + vLLM image, the one verl 0.9.x publishes and runs its CI on
# (`verlai/verl:vllm024.dev2`, built from docker/Dockerfile.stable.vllm at verl v0.9.0: vLLM 0.24.0,
# torch 2.11.0, Python 3.12); verl is then pinned to the version sarl's overrides are tested
# against. Its CUDA 13 needs an NVIDIA driver >= 580. To pin the digest, run
#   docker buildx imagetools inspect verlai/verl:vllm024.dev2
# and build with --build-arg BASE_IMAGE=verlai/verl:vllm024.dev2@sha256:<digest>. A new base needs a
# new jobs/docker/verl.Dockerfile.base.txt (its pinned packages): `make check-images` resolves the
# image's whole package set in CI. Not built in CI (no GPU, no Docker engine).
ARG BASE_IMAGE=verlai/verl:vllm024.dev2
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
# verl 0.9.1's `vllm` extra names the stack it is tested with: vLLM 0.24.0, torch 2.11.0 (both in the
# base, kept) and transformers 5.9.0. The base has transformers 5.3.0, which vLLM 0.24.0 and
# verl 0.9.1 (>= 5.5.3, < 5.11) both refuse, so it is named here: pip replaces it, and
# `make check-images` treats a package named on this line as replacing the base's pin.
RUN pip install "verl==0.9.1" "transformers==5.9.0" "./sdk[verl,local,math]" "./jobs[verl]"

# Ray (rank 0 head, other ranks workers) and the trainer run as this user.
# A numeric user and group (10001) the pods name in their securityContext (runAsNonRoot needs a
# numeric user: sarl_operator.pod_security.SARL_UID, the charts' runAsUser).
RUN groupadd --gid 10001 sarl && useradd --create-home --uid 10001 --gid 10001 sarl
USER 10001:10001
ENTRYPOINT ["python", "-m"]
CMD ["sarl_jobs.verl_trainer", "/etc/sarl/experiment.yaml"]
