# pmd: the node agent (docs/agent.md). Included from libpm/tools/CMakeLists.txt; paths are
# relative to this file so that it does not depend on the includer.
add_executable(pmd ${CMAKE_CURRENT_LIST_DIR}/pmd/main.cpp ${CMAKE_CURRENT_LIST_DIR}/pmd/command_line.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/pmix_helper.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/helper_program.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/child_agents.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/rank_streams.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/launcher_link.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/own_process.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/rank_processes.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/host_shape.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/module_path.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/dvm_host.cpp)
target_link_libraries(pmd PRIVATE libpm::libpm)
target_include_directories(pmd PRIVATE ${PROJECT_SOURCE_DIR}/libpm/src)
# A section per function, as in libpm: --gc-sections then drops what pmd never calls, and lld
# can place each function where its list says (pm_order_code, libpm/CMakeLists.txt).
target_compile_options(pmd PRIVATE -ffunction-sections -fdata-sections)
pm_target_warnings(pmd)
# pmd is on every launch path and loads nothing (what it would load runs in pmd-helper, below):
# linked wholly statically, as pmrun is (PM_STATIC_PMRUN's reasons, tools/CMakeLists.txt), it maps
# no libc.so or ld.so; with a sanitizer, only libstdc++ and libgcc are static (measured before:
# 0.45 ms against 0.9-1.6 ms to start with the shared libstdc++).
option(PM_STATIC_PMD "Link pmd statically (glibc included)" ${_pm_static_ok})
if(PM_STATIC_PMD)
  target_link_options(pmd PRIVATE -static -Wl,--gc-sections)
else()
  target_link_options(pmd PRIVATE -static-libstdc++ -static-libgcc -Wl,--gc-sections)
endif()
pm_order_code(pmd pmd)
# Installed next to pmrun (bin/), where pm::local::default_agent_path() looks first: the install
# rules of every target are in cmake/pm_install.cmake.
# pmd-helper: what pmd would load (the PMIx server module, the topology reader), in a process of
# its own that pmd starts when a job needs it (docs/agent.md, "pmd-helper"). Dynamic: it loads
# libpm-pmix.so and libpm-topology.so, found in the lib directory beside its bin directory.
add_executable(pmd-helper ${CMAKE_CURRENT_LIST_DIR}/pmd/helper_main.cpp
                          ${CMAKE_CURRENT_LIST_DIR}/pmd/pmix_gateway.cpp
                          ${CMAKE_CURRENT_LIST_DIR}/pmd/tcp_relay.cpp
                          ${CMAKE_CURRENT_LIST_DIR}/pmd/module_path.cpp
                          ${CMAKE_CURRENT_LIST_DIR}/pmd/topology_module_reader.cpp)
target_link_libraries(pmd-helper PRIVATE libpm::libpm)
target_include_directories(pmd-helper PRIVATE ${PROJECT_SOURCE_DIR}/libpm/src)
target_compile_options(pmd-helper PRIVATE -ffunction-sections -fdata-sections)
target_link_options(pmd-helper PRIVATE -static-libstdc++ -static-libgcc -Wl,--gc-sections)
pm_target_warnings(pmd-helper)
add_dependencies(pmd pmd-helper)
if(TARGET pm_pmix_module)
  file(RELATIVE_PATH _pm_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  target_compile_definitions(pmd-helper PRIVATE PM_PMIX_MODULE_DIRS="../lib:${_pm_bin_to_lib}")
  add_dependencies(pmd-helper pm_pmix_module)
endif()
# The topology reader (libpm-topology.so), loaded when a job asks for this host's shape.
if(TARGET pm_topology_module)
  file(RELATIVE_PATH _pm_bin_to_lib_t ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  target_compile_definitions(pmd-helper PRIVATE PM_TOPOLOGY_MODULE_DIRS="../lib:${_pm_bin_to_lib_t}")
  add_dependencies(pmd-helper pm_topology_module)
endif()
