// Validators shared by the subcommands' flags. CLI11's PositiveNumber and
// NonNegativeNumber let NaN through (every comparison with NaN is false),
// and a NaN or infinite duration turns into a deadline that never comes or
// has already passed; these refuse it, naming the value.
#ifndef COHORT_TOOLS_COHORT_FLAG_CHECKS_H_
#define COHORT_TOOLS_COHORT_FLAG_CHECKS_H_

#include <cmath>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"

namespace cohort::tools {

// Seconds: a finite number of at least 1 ms (or exactly 0 with
// `allow_zero`), at most 100 years
// (absl::Duration's range is far larger; this is a sanity bound).
inline CLI::Validator Seconds(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& text) -> std::string {
        double value = 0;
        if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
          return "expected a finite number of seconds, got " + text;
        }
        // Below a millisecond a duration rounds to 0 ms where it is
        // passed on in milliseconds, which means "none" or "now".
        if (value < 0 || (value < 0.001 && !(allow_zero && value == 0))) {
          return std::string("expected ") +
                 (allow_zero ? "0, or 0.001 or more" : "0.001 or more") +
                 " seconds, got " + text;
        }
        if (value > 100.0 * 365 * 24 * 3600) {
          return "at most 100 years of seconds, got " + text;
        }
        return "";
      },
      allow_zero ? "SECONDS>=0" : "SECONDS>0");
}

}  // namespace cohort::tools

#endif  // COHORT_TOOLS_COHORT_FLAG_CHECKS_H_
