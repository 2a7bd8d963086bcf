# Precompiled headers, for build time: every source file of cohort parses
# the same ~200,000 lines of third-party headers (cmake/pch/third_party.h
# says which), and CI compiles the tree three times on two cores (release,
# ASan, TSan). cohort_precompile_headers() (called at the end of the
# top-level CMakeLists.txt, once every target exists) builds two precompiled
# headers and has every target reuse one:
#   cohort_pch_lib   the libraries, tools, examples and benchmarks, compiled
#                    with the build's flags;
#   cohort_pch_test  the test binaries, compiled at -O0 (cohort_test) as
#                    position-independent executables, with GoogleTest
#                    added.
# clang accepts a precompiled header only where the language options match,
# so targets compiled with other options keep parsing for themselves:
# those under COHORT_SANITIZE_EXCLUDE (no sanitizer), the Python extension
# (hidden visibility) and the sanitizer runtime (Abseil's own sources); a
# source file given another optimisation level sets SKIP_PRECOMPILE_HEADERS
# itself (src/cohort/graph/kernels). Executables are compiled -fPIC rather
# than -fPIE to share the libraries' header (a shade slower calls in the
# executables' own code; the hot code is in the libraries, -fPIC already).
# `-DCOHORT_PCH=OFF` builds without: every file must still include what it
# uses.
option(COHORT_PCH "precompile the third-party headers every target parses" ON)
# -pthread is a language option that a precompiled header must share with
# its users; most targets get it from their dependencies, so all get it.
if(COHORT_PCH)
  add_compile_options(-pthread)
endif()

function(cohort_precompile_headers)
  if(NOT COHORT_PCH)
    return()
  endif()
  set(dir ${PROJECT_SOURCE_DIR}/cmake/pch)
  # The headers' own libraries: whatever definitions or options they give
  # their users must be in the precompiled header too.
  set(deps absl::base absl::status absl::statusor absl::strings
      absl::str_format absl::synchronization absl::time absl::flat_hash_map
      absl::flat_hash_set protobuf::libprotobuf gRPC::grpc++
      nlohmann_json::nlohmann_json)
  add_library(cohort_pch_lib OBJECT ${dir}/empty.cc)
  target_include_directories(cohort_pch_lib PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(cohort_pch_lib PRIVATE ${deps})
  target_precompile_headers(cohort_pch_lib PRIVATE ${dir}/third_party.h)
  if(COHORT_BUILD_TESTS)
    # An executable, as the tests are (-fPIE, another language option than
    # the libraries' -fPIC); gtest_main gives it its main().
    add_executable(cohort_pch_test ${dir}/empty.cc)
    target_include_directories(cohort_pch_test PRIVATE ${PROJECT_SOURCE_DIR})
    target_link_libraries(cohort_pch_test PRIVATE ${deps} GTest::gmock GTest::gtest_main)
    target_compile_options(cohort_pch_test PRIVATE -O0)
    target_precompile_headers(cohort_pch_test PRIVATE ${dir}/test_third_party.h)
  endif()
  _cohort_targets_under(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$" OR
       target MATCHES "^cohort_(pch_.*|sanitizer_runtime)$")
      continue()
    endif()
    get_target_property(source_dir ${target} SOURCE_DIR)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${source_dir})
    if(rel MATCHES "^python(/|$)")
      continue()
    endif()
    set(excluded FALSE)
    foreach(skip IN LISTS COHORT_SANITIZE_EXCLUDE)
      if(rel STREQUAL skip OR rel MATCHES "^${skip}/")
        set(excluded TRUE)
      endif()
    endforeach()
    if(excluded)
      continue()
    endif()
    get_target_property(options ${target} COMPILE_OPTIONS)
    if("-O0" IN_LIST options)
      if(TARGET cohort_pch_test)
        target_precompile_headers(${target} REUSE_FROM cohort_pch_test)
      endif()
    else()
      target_precompile_headers(${target} REUSE_FROM cohort_pch_lib)
      if(type STREQUAL "EXECUTABLE")
        # The libraries' -fPIC, not -fPIE: code that may be in a shared
        # object runs as well in a position-independent executable.
        target_compile_options(${target} PRIVATE -fPIC)
      endif()
    endif()
  endforeach()
endfunction()
