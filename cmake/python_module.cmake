# The Python package `dtrain` (python/dtrain) and its extension `dtrain._C`, which links the
# same codec library as the CLI. Two ways in, one target:
#   - the project's build (make): the extension and a copy of the package land in
#     <build>/python, which the Python tests import; skipped with a note where the Python
#     headers are missing;
#   - pip (`pip install --no-build-isolation .`, pyproject.toml): scikit-build-core sets
#     SKBUILD, so only the codecs and the extension are built (DTRAIN_PYTHON_ONLY), and the
#     install rule below puts the extension into the wheel beside the package's sources.
if(DEFINED SKBUILD)
  set(dtrain_python_only_default ON)
else()
  set(dtrain_python_only_default OFF)
endif()
option(DTRAIN_PYTHON_ONLY "Build only the codecs and the Python extension (pip)"
       ${dtrain_python_only_default})

# The extension must match the interpreter whose torch it links: the one named by
# DTRAIN_PYTHON (pip's own interpreter under scikit-build-core).
if(NOT DEFINED SKBUILD)
  set(Python_EXECUTABLE "${DTRAIN_PYTHON}")
endif()
if(DTRAIN_PYTHON_ONLY)
  find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
else()
  find_package(Python 3.9 COMPONENTS Interpreter Development.Module)
endif()
if(NOT Python_Development.Module_FOUND)
  message(STATUS "dtrain: no Python headers for ${Python_EXECUTABLE} (Debian: python3-dev); "
                 "the Python package is not built")
  return()
endif()

# torch's own Python bindings: the pybind11 caster that passes tensors without a copy.
find_library(DTRAIN_TORCH_PYTHON_LIBRARY torch_python PATHS "${TORCH_INSTALL_PREFIX}/lib"
             NO_DEFAULT_PATH REQUIRED)

# An extension module of the package: `target`, imported as dtrain.`name`, built from the
# .cpp files of src/dtrain/`folder` over the dtrain library `base`.
function(dtrain_python_extension target name folder base)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/dtrain/${folder}/*.cpp)
  python_add_library(${target} MODULE WITH_SOABI ${sources})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${name}
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/dtrain)
  target_link_libraries(${target} PRIVATE ${base} ${DTRAIN_TORCH_PYTHON_LIBRARY})
  target_compile_options(${target} PRIVATE ${DTRAIN_WARNINGS})
endfunction()

dtrain_python_extension(dtrain_python _C python dtrain_codecs)
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/dtrain/python/module.cpp PROPERTIES
  COMPILE_DEFINITIONS "DTRAIN_VERSION=\"${PROJECT_VERSION}\";DTRAIN_TORCH_VERSION=\"${Torch_VERSION}\"")
target_precompile_headers(dtrain_python REUSE_FROM dtrain_codecs)
install(TARGETS dtrain_python LIBRARY DESTINATION dtrain)

if(NOT DTRAIN_PYTHON_ONLY)
  # The package's Python sources beside the extension, so <build>/python is importable.
  add_custom_target(dtrain_python_package ALL
                    COMMAND ${CMAKE_COMMAND} -E copy_directory ${CMAKE_SOURCE_DIR}/python/dtrain
                            ${CMAKE_BINARY_DIR}/python/dtrain
                    COMMENT "Copying the dtrain Python package into the build tree")
endif()

# dtrain._backend: the torch.distributed backend (src/dtrain/torch_backend, docs/python.md),
# over dtrain_core's transport; the project's build only (a pip build carries the codecs
# alone, and `import dtrain` then registers no backend). Called once dtrain_core exists.
function(dtrain_backend_module)
  if(DTRAIN_PYTHON_ONLY OR NOT TARGET dtrain_python)
    return()
  endif()
  dtrain_python_extension(dtrain_backend_python _backend torch_backend dtrain_core)
  # c10d guards ProcessGroupGloo.hpp with USE_C10D_GLOO (as for world.cpp).
  target_compile_definitions(dtrain_backend_python PRIVATE USE_C10D_GLOO)
  # `make python` installs it beside the extension where it was built.
  install(TARGETS dtrain_backend_python LIBRARY DESTINATION dtrain OPTIONAL)
endfunction()

# The package's tests (tests/python, pytest) against the build tree, one ctest test per file.
function(dtrain_python_tests)
  if(DTRAIN_PYTHON_ONLY OR NOT TARGET dtrain)
    return()
  endif()
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "import pytest" RESULT_VARIABLE no_pytest
                  OUTPUT_QUIET ERROR_QUIET)
  if(no_pytest)
    message(STATUS "dtrain: no pytest for ${Python_EXECUTABLE}: the Python tests are not added")
    return()
  endif()
  file(GLOB test_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/python/test_*.py)
  foreach(file ${test_files})
    get_filename_component(name ${file} NAME_WE)
    add_test(NAME python.${name}
             COMMAND "${Python_EXECUTABLE}" -m pytest -q -p no:cacheprovider ${file}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests/python)
    set_tests_properties(python.${name} PROPERTIES TIMEOUT 300 LABELS python ENVIRONMENT
      "PYTHONPATH=${CMAKE_BINARY_DIR}/python;DTRAIN_BINARY=$<TARGET_FILE:dtrain>")
    if(name STREQUAL "test_torch_suite")  # a part of PyTorch's suite: tests spawn ranks each
      set_tests_properties(python.${name} PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
    endif()
  endforeach()
endfunction()
