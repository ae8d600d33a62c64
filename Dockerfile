# JupyterLab on the course, kernels on an NVIDIA GPU.
#
#   DOCKER_BUILDKIT=1 docker build -t rmsnorm-triton .
#   docker run --init --gpus all -p 8888:8888 rmsnorm-triton
#
# Needs BuildKit (the default builder of Docker 23+; Debian's docker.io 20.10 with
# DOCKER_BUILDKIT=1) and, for --gpus, the NVIDIA Container Toolkit on the host. Open the
# http://127.0.0.1:8888/lab?token=... address that the container prints.
#
# Behind a TLS-intercepting proxy, give pip the host's CA bundle as a build secret:
#   docker build --secret id=pipcert,src=/path/to/ca-bundle.crt -t rmsnorm-triton .
# BuildKit mounts it at /run/secrets/pipcert only while the two pip RUNs below run;
# it is in no layer of the image (`make test-docker` checks that).
#
# The base is PyTorch's CUDA runtime image for the torch pinned in constraints.txt
# (torch 2.13.0, which brings triton 3.7.1), so installing the project under the same
# constraints adds the course tools and keeps that torch. Where the tag comes from:
# PyTorch's release workflow (.github/workflows/docker-release.yml, with the matrix of
# .github/scripts/generate_docker_release_matrix.py) publishes
# pytorch/pytorch:<torch>-cuda<major.minor>-cudnn<major>-{runtime,devel} for each CUDA
# of the release; RELEASE.md lists CUDA 12.6 and 13.0 as 2.13's stable ones (13.2
# experimental); torch 2.13.0's wheels on PyPI are the CUDA 13.0 build (their metadata
# requires cuda-toolkit==13.0.3 and nvidia-cudnn-cu13 9.20), hence cuda13.0-cudnn9.
# Not pulled from here (no registry reachable): `make test-docker` uses a stand-in base.
# Another base: docker build --build-arg BASE_IMAGE=<image:tag> -t rmsnorm-triton .
# It needs `python` on PATH with pip; pip then installs torch 2.13.0 over a different torch.
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# A fixed numeric id (not 1000, which some Ubuntu bases already give to "ubuntu").
# The course folder is the learner's, so new notebooks and build/figures can be written
# there (WORKDIR alone would create it owned by root).
RUN useradd --create-home --uid 10001 --shell /bin/bash learner \
 && install -d -o learner -g learner /home/learner/course
WORKDIR /home/learner/course

# torch and triton first, as `make setup` does: on PyTorch's image this finds them
# installed; on another base it is the long download, and editing the package or a
# notebook does not repeat it. The secret, when given, is used as pip's CA bundle.
COPY --chown=learner:learner constraints.txt ./
RUN --mount=type=secret,id=pipcert \
    if [ -f /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    python -m pip install --no-cache-dir -c constraints.txt torch "triton; platform_system == 'Linux'"
COPY --chown=learner:learner pyproject.toml README.md ./
COPY --chown=learner:learner rmsnorm ./rmsnorm
COPY --chown=learner:learner rmsnorm_lab ./rmsnorm_lab
COPY --chown=learner:learner rmsnorm_course ./rmsnorm_course
RUN --mount=type=secret,id=pipcert \
    if [ -f /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    python -m pip install --no-cache-dir -c constraints.txt -e ".[dev]"
COPY --chown=learner:learner . .

USER 10001
ENV FIGURES_DIR=/home/learner/course/build/figures
EXPOSE 8888
# lab-settings/overrides.json: the course's JupyterLab defaults (no news pop-up), as in `make lab`.
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--ServerApp.root_dir=/home/learner/course", \
     "--LabApp.app_settings_dir=/home/learner/course/lab-settings"]
