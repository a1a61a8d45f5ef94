"""The PEP 517 build backend of bigbatch's Python package (pyproject.toml names it).

It builds the package's extension module with CMake against the torch of the Python running
pip (the same libtorch logic as scripts/setup.sh --pytorch: torch.utils.cmake_prefix_path), then
writes a wheel of the package's Python files and the module. Nothing is fetched: pip must run
with --no-build-isolation, and the environment must import torch.

  BIGBATCH_ENGINE_BUILD=DIR   build in that CMake build tree (the test lanes give theirs, so the
                              engine is compiled once), relative to the checkout unless
                              absolute; default: build-python-TORCHVERSION in the checkout
"""
import base64
import hashlib
import os
import pathlib
import subprocess
import sys
import sysconfig
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
NAME, VERSION = "bigbatch", "0.1.0"


def _fail(message):
    print(f"bigbatch build: error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _torch_facts():
    try:
        import torch
        import torch.utils
    except ImportError:
        _fail(f"{sys.executable} cannot import torch here. bigbatch builds against the torch of "
              "the environment it is installed into: install PyTorch there, and run pip with "
              "--no-build-isolation (pip install --no-build-isolation ./python)")
    return torch.__version__.split("+")[0], torch.utils.cmake_prefix_path


def _cached(build_dir, key):
    """A CMake cache entry of `build_dir` ('' when unset or no cache)."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return ""
    for line in cache.read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return ""


def _build(build_dir, prefix, torch_version):
    if not (ROOT / "CMakeLists.txt").exists():
        _fail(f"{ROOT} is not bigbatch's checkout; install from the checkout's python/ folder")
    configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"]
    if not (build_dir / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}"]
    # A build tree made for the package already names its Python (a lane's, whose environment
    # this one may share: Debian's python3-torch seen from a virtual environment).
    if not _cached(build_dir, "BIGBATCH_PYTHON"):
        configure.append(f"-DBIGBATCH_PYTHON={sys.executable}")
    print(f"bigbatch build: building the engine's Python module in {build_dir}", file=sys.stderr)
    for command in (configure, ["cmake", "--build", str(build_dir), "--target", "bigbatch_python"]):
        if subprocess.run(command, stdout=sys.stderr).returncode != 0:
            _fail("the build failed (above); scripts/setup.sh installs what it needs")
    package = build_dir / "python" / "bigbatch"
    info = {}
    exec((package / "_build_info.py").read_text(), info)
    if info["TORCH_VERSION"].split("+")[0] != torch_version:
        _fail(f"{build_dir} builds for torch {info['TORCH_VERSION']} ({info['PYTHON']}), and this "
              f"Python imports torch {torch_version}: give a build tree of this torch in "
              "BIGBATCH_ENGINE_BUILD, or none")
    return package


def _tag():
    version = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{version}-{version}-{platform}"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    torch_version, prefix = _torch_facts()
    given = os.environ.get("BIGBATCH_ENGINE_BUILD")
    # pip runs this from python/: a relative build tree is the checkout's (build, not python/build).
    build_dir = (ROOT / given).resolve() if given else ROOT / f"build-python-{torch_version}"
    package = _build(build_dir, prefix, torch_version)
    files = {}
    for path in sorted(package.iterdir()):
        if path.suffix in (".py", ".so"):
            files[f"{NAME}/{path.name}"] = path.read_bytes()
    if not any(name.endswith(".so") for name in files):
        _fail(f"no extension module in {package}")
    dist_info = f"{NAME}-{VERSION}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
        "Summary: the bigbatch engine under your own PyTorch module and loop\n"
        f"Requires-Python: >=3.9\n").encode()
    tag = _tag()
    files[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: bigbatch_build\nRoot-Is-Purelib: false\nTag: {tag}\n").encode()
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_name = f"{NAME}-{VERSION}-{tag}.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / wheel_name, "w",
                         zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []  # the environment's own torch; nothing to fetch


def build_sdist(sdist_directory, config_settings=None):
    _fail("bigbatch's package is built from its checkout (pip install --no-build-isolation ./python); "
          "it has no source distribution")
