# Install rules, the CMake package (find_package(libpm CONFIG)) and the pkg-config files.
# Included at the end of the top-level CMakeLists.txt; what goes where: docs/packaging.md.
#
#   cmake --install build --prefix P                        everything
#   cmake --install build --prefix P --component runtime    pmrun, pmd, pmsim, libpm-c.so.N
#   cmake --install build --prefix P --component devel      headers, static libraries, CMake
#                                                           package, .pc files, libpm-c.so link
#
# Everything installed is relocatable: the CMake files find the prefix from their own location
# and the .pc files from ${pcfiledir}, so the prefix can be moved or packaged with DESTDIR.
include(CMakePackageConfigHelpers)

option(PM_INSTALL "Generate libpm's install rules" ${PROJECT_IS_TOP_LEVEL})
if(NOT PM_INSTALL)
  return()
endif()

# Where libpmConfig.cmake and the .pc files go, relative to the prefix (-D to override; derived
# from CMAKE_INSTALL_LIBDIR otherwise, also when that changes later).
if(NOT DEFINED PM_INSTALL_CMAKEDIR)
  set(PM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/libpm)
endif()
if(NOT DEFINED PM_INSTALL_PKGCONFIGDIR)
  set(PM_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

# Names in the package: libpm::libpm, libpm::sim, libpm::c (bindings_c sets EXPORT_NAME c), and
# the programs as imported executables (libpm::pmrun, libpm::pmd, libpm::pmsim), so that a
# consumer can point PM_AGENT at $<TARGET_FILE:libpm::pmd>.
set_target_properties(pm PROPERTIES EXPORT_NAME libpm)
set_target_properties(pm_sim PROPERTIES EXPORT_NAME sim)

# ---- headers ------------------------------------------------------------------------------------
# <pm/*.hpp> (C++), <pm/sim/*.hpp> (the simulator), <pm/pm.h> (C).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libpm/include/pm
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT devel
        FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/sim/include/pm/sim
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pm
        COMPONENT devel
        FILES_MATCHING PATTERN "*.hpp")

# ---- libraries and programs ---------------------------------------------------------------------
# pmd goes next to pmrun, in bin/: pmrun (and libpm-c, from its own ../bin) looks there first
# (pm::local::default_agent_path), and a remote launch over ssh finds it on PATH, as Open MPI's
# orted and Hydra's hydra_pmi_proxy are found.
set(_pm_install_targets pm pm_sim pmrun pmd pmd-helper pmsim)
# pmd's PMIx server module, in lib/ (pmd finds it from its own bin/, docs/pmix.md).
if(TARGET pm_pmix_module)
  install(TARGETS pm_pmix_module LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()
# pmd's topology reader (hwloc), in lib/ beside it (docs/gpus.md).
if(TARGET pm_topology_module)
  install(TARGETS pm_topology_module LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()
if(TARGET pm_c)
  list(APPEND _pm_install_targets pm_c)
endif()
install(TARGETS ${_pm_install_targets}
        EXPORT libpmTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT devel
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel)
if(TARGET pm_c)
  install(FILES ${PROJECT_SOURCE_DIR}/bindings_c/include/pm/pm.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pm
          COMPONENT devel)
endif()

# ---- the CMake package ----------------------------------------------------------------------------
install(EXPORT libpmTargets
        NAMESPACE libpm::
        FILE libpmTargets.cmake
        DESTINATION ${PM_INSTALL_CMAKEDIR}
        COMPONENT devel)

# Pre-1.0, a minor release may break the API (0.2 is not a drop-in 0.1), so a request for 0.1
# accepts 0.1.x only; from 1.0 on, the usual rule: the same major version, at least as new.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_pm_compatibility SameMinorVersion)
else()
  set(_pm_compatibility SameMajorVersion)
endif()
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/libpmConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/libpmConfig.cmake
  INSTALL_DESTINATION ${PM_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/package/libpmConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY ${_pm_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/package/libpmConfig.cmake
              ${PROJECT_BINARY_DIR}/package/libpmConfigVersion.cmake
        DESTINATION ${PM_INSTALL_CMAKEDIR}
        COMPONENT devel)

# ---- pkg-config ---------------------------------------------------------------------------------
# prefix is found from the .pc file's own directory (${pcfiledir}), so no absolute path is baked
# in; libdir and includedir are spelled relative to it (absolute only if set absolute).
function(_pm_pc_dir var dir)
  if(IS_ABSOLUTE "${dir}")
    set(${var} "${dir}" PARENT_SCOPE)
  else()
    set(${var} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
if(IS_ABSOLUTE "${PM_INSTALL_PKGCONFIGDIR}")
  set(PM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _pm_up "/prefix/${PM_INSTALL_PKGCONFIGDIR}" "/prefix")
  string(REGEX REPLACE "/$" "" _pm_up "${_pm_up}")
  set(PM_PC_PREFIX "\${pcfiledir}/${_pm_up}")
endif()
_pm_pc_dir(PM_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
_pm_pc_dir(PM_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
_pm_pc_dir(PM_PC_BINDIR "${CMAKE_INSTALL_BINDIR}")
# What a program linking the static libpm also needs: the threads library (-pthread in the .pc
# files). Boost (Asio) and nlohmann_json are header-only.

set(_pm_pc_files libpm libpm-sim)
if(TARGET pm_c)
  list(APPEND _pm_pc_files libpm-c)
endif()
foreach(_pc IN LISTS _pm_pc_files)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${_pc}.pc.in ${PROJECT_BINARY_DIR}/package/${_pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/package/${_pc}.pc
          DESTINATION ${PM_INSTALL_PKGCONFIGDIR}
          COMPONENT devel)
endforeach()

# ---- docs ---------------------------------------------------------------------------------------
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT devel)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}
        COMPONENT devel
        FILES_MATCHING PATTERN "*.md")
