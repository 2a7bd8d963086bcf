#include "cohort/collective/local_exchange.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace cohort::collective {

Exchange LocalExchange::For(int rank) {
  auto round = std::make_shared<int>(0);
  return [this, rank, round](
             const std::string& mine,
             absl::Time deadline) -> absl::StatusOr<std::vector<std::string>> {
    const int r = (*round)++;
    absl::MutexLock lock(&mu_);
    std::vector<std::string>& slots = rounds_[r];
    slots.resize(size_);
    slots[rank] = mine;
    ++arrived_[r];
    auto all_here = [this, r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return arrived_[r] == size_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&all_here), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("exchange round ", r, ": only ", arrived_[r], " of ",
                       size_, " members arrived"));
    }
    return rounds_[r];
  };
}

}  // namespace cohort::collective
