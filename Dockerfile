# The course in a container: NVIDIA's PyTorch image (CUDA, cuDNN, NCCL and a torch built for
# them), the course's other pinned packages, Horovod built with the course's patch, and
# Fashion-MNIST. Not built by the course's CI (it has no container engine): after changing the
# base image, build it and run `ddlab doctor` and `make test` inside on a GPU machine.
#
#   docker build -t ddlab .
#   docker run --gpus all --ipc=host -p 8888:8888 ddlab            # JupyterLab on port 8888
#   docker run --gpus all --shm-size=16g ddlab ddlab doctor         # or a large /dev/shm
#
# --ipc=host or --shm-size: NCCL's SHM path and the data loaders use /dev/shm, and Docker's
# default is 64 MB; with it NCCL fails or falls back to a slower path.
#
# The base image. NGC's PyTorch images carry a torch matched to their CUDA and NCCL, and
# NVIDIA tests them together; the course keeps that torch instead of its own pinned wheel
# (requirements.txt). 25.10 is a release with Python 3.12 (the newest the course supports)
# and CUDA 13; another NGC PyTorch release works the same way: pass
# --build-arg BASE_IMAGE=nvcr.io/nvidia/pytorch:YY.MM-py3. The build stops at once if the
# image's Python is outside the course's one range (pyproject.toml's requires-python).
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.10-py3
FROM ${BASE_IMAGE}

# GPU architectures Horovod's NCCL operations are compiled for: no GPU is present while an
# image builds, so they are named (80 = A100, 90 = H100/H200, 100 = B200).
ARG HOROVOD_BUILD_CUDA_CC_LIST=80,90,100

# NCCL_NVLS_ENABLE=0: NVLink multicast (NVLS) off, as in the course's recordings. On a machine whose GPUs meet
# in an NVSwitch, NVLS could run the default path's all-reduce inside the switch, which the shm and socket
# paths (multicast off too) cannot; the tables call the default path "NCCL default, NVLS off".
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_USE_LEGACY_KERAS=1 \
    NCCL_NVLS_ENABLE=0 \
    DDLAB_DATA_DIR=/usr/share/datasets/fashion-mnist

# Fashion-MNIST from Ubuntu's package (the four IDX files in /usr/share/datasets/fashion-mnist).
RUN apt-get update \
 && apt-get install -y --no-install-recommends dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/ddlab
COPY requirements.txt requirements-lock.txt pyproject.toml README.md ./
COPY tools/check_python.py tools/
RUN python tools/check_python.py
# The course's pinned packages, without the torch (and triton) the image provides. (The lock is a
# CPU-only resolution, so it pins no CUDA package the image's torch needs.)
RUN grep -v -E '^(torch|triton)==' requirements.txt > /tmp/requirements-image.txt \
 && grep -v -E '^(torch|triton)==' requirements-lock.txt > /tmp/constraints-image.txt \
 && python -m pip install --no-cache-dir -r /tmp/requirements-image.txt -c /tmp/constraints-image.txt

COPY tools/build_horovod.sh tools/check_horovod.py tools/get_data.sh tools/
COPY source_code/patches source_code/patches
RUN PYTHON=python HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST} bash tools/build_horovod.sh \
 && rm -rf .cache/horovod/build.log

COPY . .
# The course's kernel "Python (ddlab)", as `make kernel` installs it (ddlab/course/kernel.py: the
# notebooks then open unmodified).
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e . \
 && python -m ddlab.course.kernel \
 && bash tools/get_data.sh python

EXPOSE 8888
CMD ["jupyter", "lab", "--no-browser", "--ip=0.0.0.0", "--port=8888", "--allow-root", "Start_Here.ipynb"]
