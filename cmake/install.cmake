# Installs the library and its headers and exports the CMake package `ember`, so a user's
# project can do find_package(ember) + target_link_libraries(app ember::ember).
# Included from the root CMakeLists.txt after the `ember` target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EMBER_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ember)

# The static library carries sanitizer-instrumented code in an EMBER_SANITIZE build: anything
# linking it needs the sanitizer runtimes too (the build tree gets them from add_link_options).
if(EMBER_SANITIZE)
  target_link_options(ember INTERFACE $<INSTALL_INTERFACE:-fsanitize=address,undefined>)
endif()

install(TARGETS ember EXPORT emberTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

if(TARGET ember-nvrtc-worker)
  install(TARGETS ember-nvrtc-worker RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ember)
endif()

# Headers keep their layout under include/ember/, which the installed `ember` target puts on
# the include path (next to include/), so both <ember/ember.h> and the library's own
# "core/tensor.h"-style includes resolve. The .cuh templates ship too: the JIT compiles them
# with NVRTC at run time.
install(FILES include/ember/ember.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember)
install(DIRECTORY core autograd nn optim data jit kernels distributed
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember
  FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
# The headers generated from core/ops.yaml, which the public headers include.
install(DIRECTORY ${EMBER_GEN_DIR}/core ${EMBER_GEN_DIR}/kernels ${EMBER_GEN_DIR}/nn
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember
  FILES_MATCHING PATTERN "*.h")

install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${EMBER_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/emberConfig.cmake.in
  ${PROJECT_BINARY_DIR}/emberConfig.cmake
  INSTALL_DESTINATION ${EMBER_INSTALL_CMAKEDIR})
# 0.x releases make no compatibility promise across minor versions.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/emberConfig.cmake ${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  DESTINATION ${EMBER_INSTALL_CMAKEDIR})
