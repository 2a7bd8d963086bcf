// The test binaries' precompiled headers: the libraries' (third_party.h)
// and GoogleTest's. Tests are compiled at -O0 (cohort_test), so they need a
// precompiled header of their own: clang refuses one built at another
// optimisation level.
#ifndef COHORT_CMAKE_PCH_TEST_THIRD_PARTY_H_
#define COHORT_CMAKE_PCH_TEST_THIRD_PARTY_H_

#include "cmake/pch/third_party.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#endif  // COHORT_CMAKE_PCH_TEST_THIRD_PARTY_H_
