# cmake -DSOURCE_DIR=... -DWORK_DIR=... -P static_define_check.cmake
# Configures libpm static and shared (nothing is built) and checks who is handed
# PM_STATIC_DEFINE: pmrun's compile flags and the generated libpm.pc carry it for the static
# library only.
foreach(shared OFF ON)
  set(dir "${WORK_DIR}/shared-${shared}")
  file(REMOVE_RECURSE "${dir}")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${dir}" -DBUILD_SHARED_LIBS=${shared}
            -DPM_BUILD_TESTS=OFF -DPM_BUILD_EXAMPLES=OFF -DPM_BUILD_BENCH=OFF -DPM_WITH_PMIX=OFF
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configure with BUILD_SHARED_LIBS=${shared} failed: ${err}")
  endif()
  file(READ "${dir}/libpm/tools/CMakeFiles/pmrun.dir/flags.make" flags)
  file(READ "${dir}/package/libpm.pc" pc)
  string(FIND "${flags}" "PM_STATIC_DEFINE" in_flags)
  string(FIND "${pc}" "PM_STATIC_DEFINE" in_pc)
  if(shared)
    if(NOT in_flags EQUAL -1 OR NOT in_pc EQUAL -1)
      message(FATAL_ERROR "a shared libpm hands PM_STATIC_DEFINE to its users")
    endif()
  elseif(in_flags EQUAL -1 OR in_pc EQUAL -1)
    message(FATAL_ERROR "a static libpm does not hand PM_STATIC_DEFINE to its users")
  endif()
  file(REMOVE_RECURSE "${dir}")
endforeach()
message(STATUS "PM_STATIC_DEFINE follows the library type")
