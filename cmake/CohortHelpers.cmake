# cohort_library(NAME SRCS ... DEPS ...): one static library per source directory.
function(cohort_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# cohort_test(NAME SRCS ... DEPS ... [LABELS ...] [TIMEOUT s] [SERIAL]): a GoogleTest binary
# next to the code it tests; every TEST becomes one ctest entry (SERIAL: run
# alone, RUN_SERIAL).
#
# Every test also gets the label area:<area>, the directory under src/cohort/,
# tests/ or the top level that holds it (src/cohort/coord and tests/coord are
# both area:coord), and its binary joins the targets cohort_tests_<area> and
# cohort_tests. So one area can be built and run alone, as the TSan build does:
#   cmake --build B --target cohort_tests_coord && ctest --test-dir B -L '^area:coord$'
# TIMEOUT is multiplied by COHORT_TEST_TIMEOUT_SCALE (sanitizer builds, see
# CohortSanitize.cmake).
function(cohort_test name)
  if(NOT COHORT_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "SERIAL" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(COHORT_TEST_TIMEOUT_SCALE)
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * ${COHORT_TEST_TIMEOUT_SCALE}")
  endif()
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  if(rel MATCHES "^(src/cohort|tests)/([^/]+)")
    set(area ${CMAKE_MATCH_2})
  elseif(rel MATCHES "^([^/]+)")
    set(area ${CMAKE_MATCH_1})
  else()
    set(area top)
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  # The test code itself is compiled without optimisation: it only drives the
  # code under test (libraries keep the build's -O3, or -O1 under the
  # sanitizers), and optimising gtest-heavy files costs compile time in each
  # of CI's three builds for nothing a test measures.
  target_compile_options(${name} PRIVATE -O0)
  set(serial FALSE)
  if(ARG_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} RUN_SERIAL ${serial}
      LABELS "${ARG_LABELS}")
  # CMake 3.25's gtest_discover_tests flattens a list in PROPERTIES (LABELS
  # "a;b" arrives as LABELS a b), so the full label list is set by a ctest
  # include file that runs after the discovered tests' file (it defines
  # <name>_TESTS; a binary not built defines nothing and gets no labels).
  set(labels ${ARG_LABELS} area:${area})
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${labels_file}
    "if(DEFINED ${name}_TESTS)\n"
    "  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS [==[${labels}]==])\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  foreach(group cohort_tests_${area} cohort_tests)
    if(NOT TARGET ${group})
      add_custom_target(${group})
    endif()
    add_dependencies(${group} ${name})
  endforeach()
endfunction()

# cohort_fuzzer(NAME SRCS ... DEPS ...): a libFuzzer target, built only with COHORT_FUZZ.
function(cohort_fuzzer name)
  if(NOT COHORT_FUZZ)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()
