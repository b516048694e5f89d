# output_bench: the output layer against ranks writing straight into one file (docs/output.md).
# Included from tests/bench/CMakeLists.txt with: include(output.cmake)
add_executable(output_bench ${CMAKE_CURRENT_LIST_DIR}/output_bench.cpp)
target_link_libraries(output_bench PRIVATE libpm::libpm Boost::headers)
target_include_directories(output_bench PRIVATE ${PROJECT_SOURCE_DIR}/libpm/src)
pm_target_warnings(output_bench)
set_target_properties(output_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
