# What bigbatch needs of the libtorch find_package(Torch) found, checked at configure time so a
# mismatch is one line naming the problem and the fix instead of pages of compiler or linker
# errors later. Sets BIGBATCH_TORCH_VERSION and, where libtorch asks for it, C++20 for the
# whole project (one standard for every translation unit of the program).

# The oldest libtorch bigbatch is built and tested against: Debian 12's libtorch-dev.
set(BIGBATCH_MIN_TORCH_VERSION 1.13)

function(bigbatch_torch_fail problem fix)
  message(FATAL_ERROR "bigbatch: ${problem} (libtorch at ${Torch_DIR}); ${fix}")
endfunction()

# Torch_VERSION comes from TorchConfigVersion.cmake; a very old libtorch lacks it.
set(BIGBATCH_TORCH_VERSION "${Torch_VERSION}")
if(NOT BIGBATCH_TORCH_VERSION)
  set(BIGBATCH_TORCH_VERSION "${PACKAGE_VERSION}")
endif()
if(NOT BIGBATCH_TORCH_VERSION OR BIGBATCH_TORCH_VERSION VERSION_LESS BIGBATCH_MIN_TORCH_VERSION)
  bigbatch_torch_fail(
    "libtorch ${BIGBATCH_TORCH_VERSION} is older than ${BIGBATCH_MIN_TORCH_VERSION}, the oldest bigbatch supports"
    "install Debian's libtorch-dev (1.13) or PyTorch 2.x with pip and pass -DCMAKE_PREFIX_PATH=\"$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')\"")
endif()

# libtorch's CMake files find their Caffe2 half through a search that looks in system
# directories before their own: with -DTorch_DIR alone, Debian's libtorch-dev (1.13) beside a
# wheel's 2.x mixes two versions' libraries in one link.
get_filename_component(bigbatch_own_caffe2 "${Torch_DIR}/../Caffe2" ABSOLUTE)
get_filename_component(bigbatch_found_caffe2 "${Caffe2_DIR}" ABSOLUTE)
if(EXISTS "${bigbatch_own_caffe2}" AND NOT bigbatch_own_caffe2 STREQUAL bigbatch_found_caffe2)
  bigbatch_torch_fail(
    "libtorch's Caffe2 files were found at ${Caffe2_DIR}, another libtorch's than ${bigbatch_own_caffe2}"
    "configure a fresh build directory with -DCMAKE_PREFIX_PATH=\"$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')\" instead of -DTorch_DIR")
endif()

# The pre-C++11 string ABI (PyTorch wheels before 2.7 and the 'pre-cxx11' libtorch zips) cannot
# link with Debian's C++ libraries (GoogleTest, toml++, SentencePiece), which use the C++11 ABI.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  bigbatch_torch_fail(
    "libtorch ${BIGBATCH_TORCH_VERSION} was built with the pre-C++11 string ABI (_GLIBCXX_USE_CXX11_ABI=0), which cannot link with this system's C++ libraries"
    "use PyTorch 2.7 or newer (its wheels use the C++11 ABI) or a 'cxx11-abi' libtorch")
endif()

# libtorch 2.15 (not yet 2.11) requires C++20 through its target's compile features. Build the whole
# project in the standard libtorch needs, and refuse a standard set by hand that is older.
get_target_property(bigbatch_torch_features torch INTERFACE_COMPILE_FEATURES)
get_target_property(bigbatch_torch_options torch INTERFACE_COMPILE_OPTIONS)
set(BIGBATCH_TORCH_CXX_STANDARD 17)
if("cxx_std_20" IN_LIST bigbatch_torch_features OR bigbatch_torch_options MATCHES "-std=c\\+\\+20")
  set(BIGBATCH_TORCH_CXX_STANDARD 20)
endif()
if(BIGBATCH_TORCH_CXX_STANDARD GREATER CMAKE_CXX_STANDARD)
  if(BIGBATCH_CXX_STANDARD_FROM_USER)
    bigbatch_torch_fail(
      "libtorch ${BIGBATCH_TORCH_VERSION} needs C++${BIGBATCH_TORCH_CXX_STANDARD} but -DCMAKE_CXX_STANDARD=${CMAKE_CXX_STANDARD} was given"
      "configure again without -DCMAKE_CXX_STANDARD or with -DCMAKE_CXX_STANDARD=${BIGBATCH_TORCH_CXX_STANDARD}")
  endif()
  if(NOT "cxx_std_${BIGBATCH_TORCH_CXX_STANDARD}" IN_LIST CMAKE_CXX_COMPILE_FEATURES)
    bigbatch_torch_fail(
      "libtorch ${BIGBATCH_TORCH_VERSION} needs C++${BIGBATCH_TORCH_CXX_STANDARD}, which ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} does not offer"
      "use GCC 10 or newer (Debian 12 has 12)")
  endif()
  set(CMAKE_CXX_STANDARD ${BIGBATCH_TORCH_CXX_STANDARD})
endif()
message(STATUS "bigbatch: libtorch ${BIGBATCH_TORCH_VERSION} (${Torch_DIR}), C++${CMAKE_CXX_STANDARD}")

# Where libtorch is a PyTorch wheel's: link its own CUDA, NCCL and cuDNN libraries.
include(${CMAKE_CURRENT_LIST_DIR}/TorchWheelLibraries.cmake)
