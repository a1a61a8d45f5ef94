# Included after find_package(Torch), by bigbatch's build and by its installed package (a
# program that links bigbatch links libtorch the same way).
#
# A PyTorch wheel's libtorch runs with the CUDA runtime, NCCL and cuDNN of the wheel's nvidia/*
# packages (its own run path names them). Its CMake files instead link a program with the CUDA
# toolkit's libraries and, through a search that looks in system directories first, with any
# libc10 found there (Debian's 1.13 when libtorch-dev is installed). Then the link fails where
# the toolkit's NCCL is older than the wheel's, and a program that links loads two versions of
# one library. Link what the wheel has from the wheel, so the process holds one of each.
get_filename_component(BIGBATCH_TORCH_SITE "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
file(GLOB BIGBATCH_WHEEL_LIB_DIRS LIST_DIRECTORIES true "${BIGBATCH_TORCH_SITE}/nvidia/*/lib")
set(BIGBATCH_TORCH_LIB_DIRS "${TORCH_INSTALL_PREFIX}/lib" ${BIGBATCH_WHEEL_LIB_DIRS})

# The wheel's copy of the library at `path` (libcudart.so -> nvidia/cu13/lib/libcudart.so.13),
# or `path` itself when the wheel has none or it is the wheel's already.
function(bigbatch_wheel_copy path out)
  set(${out} "${path}" PARENT_SCOPE)
  if(NOT IS_ABSOLUTE "${path}" OR NOT EXISTS "${path}")
    return()
  endif()
  foreach(dir IN LISTS BIGBATCH_TORCH_LIB_DIRS)
    string(FIND "${path}" "${dir}/" at)  # a prefix, not a pattern: paths may hold + and .
    if(at EQUAL 0)
      return()
    endif()
  endforeach()
  get_filename_component(name "${path}" NAME)
  string(REGEX REPLACE "\\.so.*$" "" stem "${name}")
  foreach(dir IN LISTS BIGBATCH_TORCH_LIB_DIRS)
    file(GLOB copies "${dir}/${stem}.so*")
    if(copies)
      list(SORT copies)
      list(GET copies 0 copy)
      set(${out} "${copy}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

if(BIGBATCH_WHEEL_LIB_DIRS)
  set(libraries)
  foreach(library IN LISTS TORCH_LIBRARIES)
    bigbatch_wheel_copy("${library}" library)
    list(APPEND libraries "${library}")
  endforeach()
  set(TORCH_LIBRARIES ${libraries})
  foreach(target CUDA::cudart CUDA::nvrtc CUDA::cupti CUDA::cublas CUDA::cublasLt CUDA::cufft CUDA::curand
                 CUDA::cusparse CUDA::cusolver CUDA::nvJitLink CUDA::nvtx3)
    if(TARGET ${target})
      get_target_property(location ${target} IMPORTED_LOCATION)
      bigbatch_wheel_copy("${location}" copy)
      if(NOT copy STREQUAL location)
        set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${copy}")
      endif()
    endif()
  endforeach()
  # Libraries libtorch needs in turn (NCCL, cuDNN) are found at link time where it finds them
  # at run time.
  foreach(dir IN LISTS BIGBATCH_WHEEL_LIB_DIRS)
    add_link_options("LINKER:-rpath-link,${dir}")
  endforeach()
  # PyTorch 2.11's libtorch.so exports copies of libstdc++'s std::filesystem functions, built
  # in by its own toolchain; a program's calls bound to them crashed (remove_all jumped to
  # address 0). Naming libstdc++ first among the libraries the program needs makes the
  # program's std:: calls find the real ones, whatever a libtorch exports.
  add_link_options("SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
  message(STATUS "bigbatch: linked with the CUDA, NCCL and cuDNN libraries of the PyTorch wheel (${BIGBATCH_TORCH_SITE}/nvidia)")
endif()
