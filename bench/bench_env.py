"""The environment bigbatch gives itself at start-up (src/runtime/runtime_env.cpp), for every
side of a benchmark: the peers get the same BLAS kernels and OpenMP wait policy as bigbatch.

- OMP_WAIT_POLICY=PASSIVE unless set.
- OPENBLAS_CORETYPE only where OpenBLAS falls back to a generic core on this CPU (then
  SkylakeX with AVX-512, Haswell with AVX2), never forced otherwise: forcing SkylakeX on a CPU
  without AVX-512 kills every side with SIGILL.
"""
import ctypes
import os
import subprocess

# OpenBLAS's fallbacks when it does not know the CPU (runtime_env.cpp: is_generic_core).
GENERIC_CORES = {"Prescott", "Core2", "Nehalem", "Penryn", "Dunnington", "Katmai", "Coppermine",
                 "Northwood", "Banias", "Atom"}


def openblas_core():
    """The core OpenBLAS picks here by itself (None when the BLAS is not OpenBLAS)."""
    for name in ("libblas.so.3", "libopenblas.so.0"):  # libtorch's BLAS, then OpenBLAS by name
        try:
            corename = ctypes.CDLL(name).openblas_get_corename
        except (OSError, AttributeError):
            continue
        corename.restype = ctypes.c_char_p
        return corename().decode()
    return None


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def bigbatch_environment(base=None):
    env = dict(os.environ if base is None else base)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "OPENBLAS_CORETYPE" not in env and openblas_core() in GENERIC_CORES:
        flags = cpu_flags()
        better = "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None
        if better:
            env["OPENBLAS_CORETYPE"] = better
    return env


if __name__ == "__main__":
    import argparse
    argparse.ArgumentParser(description="Prints the variables the benchmarks add to every "
                            "side's environment (what bigbatch gives itself on this machine).").parse_args()
    env = bigbatch_environment()
    for name in ("OMP_WAIT_POLICY", "OPENBLAS_CORETYPE"):
        print(f"{name}={env.get(name, '(unset: ' + str(openblas_core()) + ' chosen by OpenBLAS)')}")


def libtorch_version(build):
    """The libtorch a bigbatch build links, from its CMake cache (Torch_DIR holds the version file)."""
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        torch_dir = next(line.split("=", 1)[1].strip() for line in f if line.startswith("Torch_DIR:"))
    with open(os.path.join(torch_dir, "TorchConfigVersion.cmake")) as f:
        return next(line.split('"')[1] for line in f if "PACKAGE_VERSION " in line)


def python_torch_version(python):
    """The PyTorch version a Python interpreter imports."""
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, check=True).stdout.strip()


def side_names(builds, torch_version, compiled, handwritten):
    """A comparison's sides in order: every bigbatch build (named by its libtorch), PyTorch in
    Python eager, then torch.compile'd and the hand-written libtorch loop where asked for."""
    names = [f"bigbatch {libtorch_version(b)}" for b in builds] + [f"PyTorch {torch_version} eager"]
    if compiled:
        names.append(f"PyTorch {torch_version} compiled")
    if handwritten:
        names.append("hand-written")
    return names
