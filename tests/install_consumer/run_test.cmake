# Driven by tests/install_consumer.cmake (cmake -P): install, configure, build, run.
# Inputs: EMBER_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR CONFIG GENERATOR CXX_COMPILER
#         PREFIX_PATH (the parent build's CMAKE_PREFIX_PATH, '|'-separated)
#         CUDA_TOOLKIT_ROOT (empty without CUDA).
cmake_minimum_required(VERSION 3.24)

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

function(step)
  string(JOIN " " shown ${ARGV})
  message(STATUS "install_consumer: ${shown}")
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: failed (${rc}): ${shown}")
  endif()
endfunction()

if(NOT CONFIG)
  set(CONFIG Release)
endif()
step(${CMAKE_COMMAND} --install ${EMBER_BUILD_DIR} --prefix ${prefix} --config ${CONFIG})

# Search the scratch prefix first, then where the parent build found its dependencies. The
# environment form (':'-separated) keeps the list out of argument splitting. The consumer
# project checks that ember really came from the scratch prefix.
set(search ${prefix})
if(PREFIX_PATH)
  string(REPLACE "|" ";" parent_prefixes "${PREFIX_PATH}")
  list(APPEND search ${parent_prefixes})
endif()
string(REPLACE ";" ":" search "${search}")
set(ENV{CMAKE_PREFIX_PATH} "${search}")
set(configure_args -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DEMBER_EXPECTED_PREFIX=${prefix})
if(CUDA_TOOLKIT_ROOT)
  list(APPEND configure_args -DCUDAToolkit_ROOT=${CUDA_TOOLKIT_ROOT})
endif()
step(${CMAKE_COMMAND} ${configure_args})
step(${CMAKE_COMMAND} --build ${build} --config ${CONFIG})

find_program(consumer ember_consumer PATHS ${build} ${build}/${CONFIG} NO_DEFAULT_PATH REQUIRED)
step(${consumer})
