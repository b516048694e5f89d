# sim_bench: the simulator at 1k..100k hosts x 8 slots, one rank failing (docs/simulator.md).
# Included from tests/bench/CMakeLists.txt with: include(sim.cmake)
add_executable(sim_bench ${CMAKE_CURRENT_LIST_DIR}/sim_bench.cpp)
target_link_libraries(sim_bench PRIVATE libpm::sim)
pm_target_warnings(sim_bench)
set_target_properties(sim_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
