# Sanitizer builds (scripts/sanitize.sh runs them in CI).
#
#   -DCOHORT_SANITIZE=address,undefined   AddressSanitizer + UndefinedBehaviorSanitizer
#   -DCOHORT_SANITIZE=thread              ThreadSanitizer (also needs
#                                         -DCOHORT_TSAN_ABSEIL_SOURCE_DIR, see below)
#
# Every target is compiled and linked with -fsanitize=... at -O1 (fast enough
# to run the suite) with -gline-tables-only, and UB is fatal, so a sanitizer
# report fails the test that triggered it. Line tables are all the reports need
# (function, file:line and inlined frames in every stack); full -g made the
# Eigen kernels compile 1.4x slower (elementwise_ops.cc, ASan+UBSan: 256 s of
# CPU with -g, 180 s with line tables only). Every executable gets the
# default runtime options (cohort_sanitizer_options.cc, generated below), so
# gtest_discover_tests, ctest and the child processes that multi-process tests
# start behave the same without any environment; ASAN_OPTIONS, UBSAN_OPTIONS,
# TSAN_OPTIONS and LSAN_OPTIONS still override them.
#
# ThreadSanitizer sees a lock only when the lock's code is instrumented.
# Debian's libabsl_synchronization.so is not, so under TSan every member guarded
# by an absl::Mutex would be reported as a race (checked: two threads
# incrementing an int under absl::MutexLock are reported). The TSan build
# therefore compiles absl/synchronization (and the LowLevelAlloc it allocates
# from) from the source of the installed Abseil release (scripts/sanitize.sh
# fetches it with `apt-get source`) with -fsanitize=thread, whose code then
# carries Abseil's own TSan annotations, and links it into every executable. The executable's copy also takes the place of
# the shared library's for gRPC, which locks with absl::Mutex too, so TSan sees
# gRPC's locks as well (gRPC's own memory accesses stay uninstrumented: it
# never reports inside gRPC, and a hand-off that gRPC makes through a bare
# atomic is invisible to it).

set(COHORT_SANITIZE "" CACHE STRING
  "clang sanitizers for every target: empty, address,undefined, or thread")
set_property(CACHE COHORT_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")
set(COHORT_TSAN_ABSEIL_SOURCE_DIR "" CACHE PATH
  "TSan builds: the source tree of the installed Abseil release (apt-get source abseil)")
set(COHORT_SANITIZE_EXCLUDE "" CACHE STRING
  "directories (from the top, e.g. src/cohort/graph) whose targets are compiled without \
the sanitizer and without debug info, to save build time; they still link and run")

# cohort_test() multiplies every test's TIMEOUT by this (sanitized code is
# 2-15x slower, more with both cores busy).
set(COHORT_TEST_TIMEOUT_SCALE 1)

if(COHORT_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "COHORT_SANITIZE needs clang (CMAKE_CXX_COMPILER=clang++-14)")
  endif()
  string(REPLACE "," ";" _cohort_sanitizers "${COHORT_SANITIZE}")
  foreach(_s IN LISTS _cohort_sanitizers)
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "COHORT_SANITIZE: unknown sanitizer '${_s}' "
        "(use address,undefined or thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _cohort_sanitizers AND "address" IN_LIST _cohort_sanitizers)
    message(FATAL_ERROR "COHORT_SANITIZE: thread and address cannot share a build")
  endif()
  if(COHORT_FUZZ AND NOT "address" IN_LIST _cohort_sanitizers)
    message(FATAL_ERROR "COHORT_FUZZ goes with COHORT_SANITIZE=address,undefined "
      "(the fuzzers are built into the ASan build)")
  endif()

  set(_cohort_san_flags -fsanitize=${COHORT_SANITIZE} -fno-omit-frame-pointer)
  if("undefined" IN_LIST _cohort_sanitizers)
    # Abort on the first UB report instead of printing and carrying on.
    list(APPEND _cohort_san_flags -fno-sanitize-recover=undefined)
  endif()
  # Compile options come after CMAKE_CXX_FLAGS_<CONFIG> on the command line,
  # so these win over the build type's -O2 -g.
  add_compile_options(${_cohort_san_flags} -O1 -gline-tables-only)
  add_link_options(${_cohort_san_flags})

  if("thread" IN_LIST _cohort_sanitizers)
    set(COHORT_TEST_TIMEOUT_SCALE 5)
  else()
    set(COHORT_TEST_TIMEOUT_SCALE 3)
  endif()

  # Default runtime options, compiled into every executable.
  #  ASan: leaks fail the run; catch static-initialisation order bugs and
  #        stack use after return (callbacks holding references to locals).
  #  UBSan: a stack with every report (the build already aborts on the first).
  #  TSan: report every race in a run (a report still fails the test: exit code
  #        66), with both stacks of a lock-order inversion.
  # Suppression files are used when they exist; they hold third-party code only.
  set(_cohort_asan "detect_leaks=1:check_initialization_order=1:strict_init_order=1")
  string(APPEND _cohort_asan ":detect_stack_use_after_return=1")
  set(_cohort_ubsan "print_stacktrace=1:halt_on_error=1")
  set(_cohort_tsan "halt_on_error=0:second_deadlock_stack=1")
  # The statistics of suppressed leaks would land in the report directory
  # as if they were a report; what is suppressed is in lsan.supp.
  set(_cohort_lsan "print_suppressions=0")
  foreach(_kind ubsan tsan lsan)
    set(_supp ${PROJECT_SOURCE_DIR}/scripts/${_kind}.supp)
    if(EXISTS ${_supp})
      if(_cohort_${_kind})
        string(APPEND _cohort_${_kind} ":")
      endif()
      string(APPEND _cohort_${_kind} "suppressions=${_supp}")
    endif()
  endforeach()
  set(_cohort_options_cc ${CMAKE_BINARY_DIR}/cohort_sanitizer_options.cc)
  file(CONFIGURE OUTPUT ${_cohort_options_cc} @ONLY CONTENT [[
// Generated by cmake/CohortSanitize.cmake: the default options of the
// sanitizer runtimes, linked into every executable of a COHORT_SANITIZE build.
// The *SAN_OPTIONS environment variables override them. The hooks run before
// the runtime is initialised, so they must not be instrumented themselves.
#define COHORT_SANITIZER_HOOK                                              \
  extern "C" __attribute__((no_sanitize("address", "thread", "undefined"))) \
  __attribute__((visibility("default"), used)) const char*
COHORT_SANITIZER_HOOK __asan_default_options() { return "@_cohort_asan@"; }
COHORT_SANITIZER_HOOK __ubsan_default_options() { return "@_cohort_ubsan@"; }
COHORT_SANITIZER_HOOK __tsan_default_options() { return "@_cohort_tsan@"; }
COHORT_SANITIZER_HOOK __lsan_default_options() { return "@_cohort_lsan@"; }
]])

  # One object library, linked into every executable by
  # cohort_sanitize_executables() (called at the end of the top-level
  # CMakeLists.txt, once every target exists).
  add_library(cohort_sanitizer_runtime OBJECT ${_cohort_options_cc})

  if("thread" IN_LIST _cohort_sanitizers)
    set(_absl_src "${COHORT_TSAN_ABSEIL_SOURCE_DIR}")
    if(NOT EXISTS "${_absl_src}/absl/synchronization/mutex.cc")
      message(FATAL_ERROR
        "COHORT_SANITIZE=thread: set COHORT_TSAN_ABSEIL_SOURCE_DIR to the source of the "
        "installed Abseil (${absl_VERSION}); `bash scripts/sanitize.sh tsan` fetches it. "
        "Without it TSan cannot see absl::Mutex and reports every guarded member.")
    endif()
    # The source must be the installed release: the objects replace the
    # shared library's at run time, and are compiled against its headers.
    file(STRINGS "${_absl_src}/absl/base/config.h" _src_lts
      REGEX "^#define ABSL_LTS_RELEASE_")
    get_target_property(_sys_inc absl::config INTERFACE_INCLUDE_DIRECTORIES)
    find_file(_sys_config absl/base/config.h PATHS ${_sys_inc} /usr/include NO_CACHE)
    file(STRINGS "${_sys_config}" _sys_lts REGEX "^#define ABSL_LTS_RELEASE_")
    if(NOT _src_lts STREQUAL _sys_lts)
      message(FATAL_ERROR "COHORT_TSAN_ABSEIL_SOURCE_DIR holds '${_src_lts}', the "
        "installed Abseil '${_sys_lts}'")
    endif()
    # absl::Mutex, CondVar, Notification, Barrier, BlockingCounter and the
    # per-thread state they park threads on; and LowLevelAlloc, which hands
    # that per-thread state out of mmap()ed blocks under a SpinLock: left
    # uninstrumented, TSan sees each thread's first use of its block race with
    # the mmap() of the block by whichever thread made it. And absl::Status,
    # whose reference count is taken in header code (instrumented) but dropped
    # in status.cc: left uninstrumented, every Status shared between threads
    # (a timer thread's error handed to a waiter) is reported when freed.
    set(_absl_tsan_srcs
      synchronization/barrier.cc
      synchronization/blocking_counter.cc
      synchronization/internal/create_thread_identity.cc
      synchronization/internal/graphcycles.cc
      synchronization/internal/per_thread_sem.cc
      synchronization/internal/waiter.cc
      synchronization/mutex.cc
      synchronization/notification.cc
      base/internal/low_level_alloc.cc
      status/status.cc)
    list(TRANSFORM _absl_tsan_srcs PREPEND ${_absl_src}/absl/)
    target_sources(cohort_sanitizer_runtime PRIVATE ${_absl_tsan_srcs})
    # Abseil's code is not ours to warn about; its includes ("absl/...")
    # resolve to the installed headers, which the rest of the build uses.
    set_source_files_properties(${_absl_tsan_srcs} PROPERTIES COMPILE_OPTIONS "-w")
    # What those objects call in the rest of Abseil (base, time, cord...).
    target_link_libraries(cohort_sanitizer_runtime PUBLIC absl::synchronization absl::status)
  endif()
endif()

# Collects the targets defined in `dir` and its subdirectories into `out`.
function(_cohort_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _cohort_targets_under(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Links cohort_sanitizer_runtime into every executable of the project, and
# compiles the targets under COHORT_SANITIZE_EXCLUDE without instrumentation.
# The property is appended to directly (not target_link_libraries) so that it
# mixes with either target_link_libraries signature in the subdirectories.
function(cohort_sanitize_executables)
  if(NOT TARGET cohort_sanitizer_runtime)
    return()
  endif()
  _cohort_targets_under(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      set_property(TARGET ${target} APPEND PROPERTY LINK_LIBRARIES cohort_sanitizer_runtime)
    endif()
    if(NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      continue()
    endif()
    get_target_property(dir ${target} SOURCE_DIR)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${dir})
    foreach(excluded IN LISTS COHORT_SANITIZE_EXCLUDE)
      if(rel STREQUAL excluded OR rel MATCHES "^${excluded}/")
        # Later flags win: no instrumentation, no debug info. Code that is
        # not instrumented cannot report; under TSan it also goes unseen (no
        # false reports: its own accesses are simply not checked).
        target_compile_options(${target} PRIVATE -fno-sanitize=all -g0)
        break()
      endif()
    endforeach()
  endforeach()
endfunction()
