# link_bench: the agent link's message codec, encode and decode (docs/agent-link.md).
# Included from tests/bench/CMakeLists.txt with: include(link.cmake)
add_executable(link_bench ${CMAKE_CURRENT_LIST_DIR}/link_bench.cpp)
target_link_libraries(link_bench PRIVATE libpm::libpm benchmark::benchmark)
target_include_directories(link_bench PRIVATE ${PROJECT_SOURCE_DIR}/libpm/src)
pm_target_warnings(link_bench)
set_target_properties(link_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
