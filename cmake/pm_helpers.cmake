# Warnings (as errors when PM_WERROR) for one of the project's own targets.
function(pm_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
                              -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough>
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes>
    # GCC 12 reports std::variant moves as "maybe uninitialized" (GCC bug 105937 and kin), and at
    # -O3 (CMAKE_BUILD_TYPE=Release) a memcpy "overlap" inside std::string's operator+ (bug 105329).
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized -Wno-restrict>
    $<$<BOOL:${PM_WERROR}>:-Werror>)
endfunction()

# What every GoogleTest executable is compiled with; the tests' precompiled headers (pm_test_pch)
# are made with the same, or the compiler could not use them.
function(pm_test_flags target)
  target_link_libraries(${target} PRIVATE GTest::gtest GTest::gtest_main)
  pm_target_warnings(${target})
  # A test's own code needs no -O2 (libpm it links keeps it): -Og compiles a gtest file in about
  # 80 % of the time of -O1 (launcher_test 10.5 s against 13 s; GCC's -O0 is no faster than -O1
  # on these template-heavy files), and CI builds some 120 of them.
  target_compile_options(${target} PRIVATE $<$<CONFIG:RelWithDebInfo>:-Og>)
  # Under the sanitizers (the Debug presets) likewise -O0, after the preset's -O1: an ASan test
  # file compiles in half the time; libpm, the code under test, keeps the preset's -O1.
  target_compile_options(${target} PRIVATE $<$<CONFIG:Debug>:-O0>)
endfunction()

# The headers most tests include, parsed once for all of them (pm_add_gtest reuses them): the
# tests compile in about 13 % less time (docs/fuzzing.md, "Cost"). An executable of no code of its
# own, so that it is compiled exactly as the tests are (-fPIE).
function(pm_add_test_pch)
  set(anchor ${CMAKE_CURRENT_BINARY_DIR}/pm_test_pch.cpp)
  # Written only when it changes: a fresh file at every configure would relink the target.
  file(CONFIGURE OUTPUT ${anchor}
       CONTENT "// The tests' precompiled headers are made with this file (cmake/pm_helpers.cmake).\n")
  add_executable(pm_test_pch ${anchor})
  set_target_properties(pm_test_pch PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  target_link_libraries(pm_test_pch PRIVATE nlohmann_json::nlohmann_json)
  pm_test_flags(pm_test_pch)
  target_precompile_headers(pm_test_pch PRIVATE
    <gtest/gtest.h> <nlohmann/json.hpp>
    <algorithm> <chrono> <filesystem> <fstream> <functional> <map> <memory> <optional> <regex>
    <set> <sstream> <string> <string_view> <thread> <vector>)
endfunction()

# One GoogleTest executable per test source; its tests are discovered when ctest runs.
function(pm_add_gtest source)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "LIBS" ${ARGN})
  get_filename_component(name ${source} NAME_WE)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS})
  pm_test_flags(${name})
  target_precompile_headers(${name} REUSE_FROM pm_test_pch)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  # Listing a test's cases runs it: 5 s (CMake's default) was too short for a sanitized binary
  # on a 2-core machine busy with a build (ctest then ran no test at all).
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABEL}" TIMEOUT ${ARG_TIMEOUT})
endfunction()
