# JupyterLab on the course, kernels on an NVIDIA GPU.
#
#   docker build -t rmsnorm-triton .
#   docker run --gpus all -p 8888:8888 rmsnorm-triton
#
# Needs the NVIDIA Container Toolkit on the host (for --gpus). Open the
# http://127.0.0.1:8888/lab?token=... address that the container prints.
#
# The base is PyTorch's CUDA runtime image for the torch version pinned in
# constraints.txt (torch 2.13.0, which brings triton 3.7.1), so installing the
# project under the same constraints adds the course tools and keeps that torch.
# Another base: docker build --build-arg BASE_IMAGE=<image:tag> -t rmsnorm-triton .
# (pip then installs torch 2.13.0 over a different torch, as constraints.txt says).
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# A fixed numeric id (not 1000, which some Ubuntu bases already give to "ubuntu").
RUN useradd --create-home --uid 10001 --shell /bin/bash learner
WORKDIR /home/learner/course

# Dependencies first, so editing a notebook does not reinstall them.
COPY --chown=learner:learner pyproject.toml constraints.txt README.md ./
COPY --chown=learner:learner rmsnorm ./rmsnorm
RUN python -m pip install --no-cache-dir -c constraints.txt -e ".[dev]"
COPY --chown=learner:learner . .

USER 10001
ENV FIGURES_DIR=/home/learner/course/build/figures
EXPOSE 8888
# lab-settings/overrides.json: the course's JupyterLab defaults (no news pop-up), as in `make lab`.
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--ServerApp.root_dir=/home/learner/course", \
     "--LabApp.app_settings_dir=/home/learner/course/lab-settings"]
