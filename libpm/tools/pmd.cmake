# pmd: the node agent (docs/agent.md). Included from libpm/tools/CMakeLists.txt; paths are
# relative to this file so that it does not depend on the includer.
add_executable(pmd ${CMAKE_CURRENT_LIST_DIR}/pmd/main.cpp ${CMAKE_CURRENT_LIST_DIR}/pmd/command_line.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/pmix_gateway.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/pmd/tcp_relay.cpp
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
# pmd is on every launch path: without libstdc++'s dynamic relocations it starts about as fast
# as /bin/true (measured 0.45 ms against 0.9-1.6 ms with the shared libstdc++), and it maps less.
target_link_options(pmd PRIVATE -static-libstdc++ -static-libgcc -Wl,--gc-sections)
pm_order_code(pmd pmd)
# Installed next to pmrun (bin/), where pm::local::default_agent_path() looks first: the install
# rules of every target are in cmake/pm_install.cmake.
# The PMIx server module (libpm-pmix.so) lives in the lib directory beside pmd's bin directory,
# in the build tree and when installed; pmd opens it when a rank first connects (docs/pmix.md).
if(TARGET pm_pmix_module)
  file(RELATIVE_PATH _pm_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  target_compile_definitions(pmd PRIVATE PM_WITH_PMIX_MODULE=1
                             PM_PMIX_MODULE_DIRS="../lib:${_pm_bin_to_lib}")
  add_dependencies(pmd pm_pmix_module)
endif()
# The topology reader (libpm-topology.so), loaded when a job asks for this host's shape.
if(TARGET pm_topology_module)
  file(RELATIVE_PATH _pm_bin_to_lib_t ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  target_compile_definitions(pmd PRIVATE PM_TOPOLOGY_MODULE_DIRS="../lib:${_pm_bin_to_lib_t}")
  add_dependencies(pmd pm_topology_module)
endif()
