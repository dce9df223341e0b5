# A ctest test that installs Ember into a scratch prefix, then configures, builds and runs the
# tiny project in install_consumer/ against it through find_package(ember). It checks the
# exported package (targets, headers, dependencies), not the library's numerics; no GPU needed.
set(EMBER_CONSUMER_WORK ${CMAKE_CURRENT_BINARY_DIR}/install_consumer)
# The parent's search prefixes (where its dependencies live), '|'-separated to survive add_test.
string(REPLACE ";" "|" EMBER_CONSUMER_PREFIX_PATH "${CMAKE_PREFIX_PATH}")
add_test(NAME "install: find_package(ember) consumer"
  COMMAND ${CMAKE_COMMAND}
    -DEMBER_BUILD_DIR=${PROJECT_BINARY_DIR}
    -DCONSUMER_SOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/install_consumer
    -DWORK_DIR=${EMBER_CONSUMER_WORK}
    -DCONFIG=$<CONFIG>
    -DGENERATOR=${CMAKE_GENERATOR}
    -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
    -DPREFIX_PATH=${EMBER_CONSUMER_PREFIX_PATH}
    -DCUDA_TOOLKIT_ROOT=${CUDAToolkit_LIBRARY_ROOT}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/install_consumer/run_test.cmake)
set_tests_properties("install: find_package(ember) consumer" PROPERTIES
  LABELS install TIMEOUT 600 RESOURCE_LOCK ember_install_consumer)
