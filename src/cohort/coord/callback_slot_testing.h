// Slot<T>: a service callback's result for tests; Wait() blocks (real time,
// bounded) until the callback ran, and fails the test if it never does.
#ifndef COHORT_COORD_CALLBACK_SLOT_TESTING_H_
#define COHORT_COORD_CALLBACK_SLOT_TESTING_H_

#include <functional>
#include <optional>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace cohort::coord {

template <typename T>
struct Slot {
  absl::Notification done;
  std::optional<T> value;
  std::function<void(T)> Callback() {
    return [this](T v) {
      value = std::move(v);
      done.Notify();
    };
  }
  bool Ready() { return done.HasBeenNotified(); }
  T Wait() {
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)))
        << "callback never ran";
    return *value;
  }
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_CALLBACK_SLOT_TESTING_H_
