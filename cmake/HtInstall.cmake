# Installs the library, its public headers and an exported package config so
# that an outside project can `find_package(hypertrain)` and link
# hypertrain::hypertrain.
include(CMakePackageConfigHelpers)

install(TARGETS hypertrain EXPORT hypertrainTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ht DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/ht/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ht)
install(EXPORT hypertrainTargets NAMESPACE hypertrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hypertrain)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hypertrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hypertrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hypertrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hypertrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hypertrainConfig.cmake ${PROJECT_BINARY_DIR}/hypertrainConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hypertrain)
