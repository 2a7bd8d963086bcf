#include "bench/common/flags.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort::bench {

FlagReader::FlagReader(std::vector<std::string> args, std::string usage)
    : args_(std::move(args)), usage_(std::move(usage)) {}

bool FlagReader::Has(absl::string_view name) const {
  return std::find(args_.begin(), args_.end(), name) != args_.end();
}

bool FlagReader::Next() {
  if (!ok() || next_ >= args_.size()) return false;
  name_ = args_[next_++];
  has_inline_ = false;
  inline_value_.clear();
  if (const size_t eq = name_.find('=');
      absl::StartsWith(name_, "--") && eq != std::string::npos) {
    inline_value_ = name_.substr(eq + 1);
    name_.resize(eq);
    has_inline_ = true;
  }
  return true;
}

bool FlagReader::Switch(bool& out) {
  if (has_inline_) return Fail(absl::StrCat(name_, " takes no value"));
  out = true;
  return true;
}

bool FlagReader::Value(std::string& out) {
  if (has_inline_) {
    out = inline_value_;
    return true;
  }
  if (next_ >= args_.size()) return Fail(absl::StrCat(name_, " needs a value"));
  out = args_[next_++];
  return true;
}

bool FlagReader::PositiveInt(int& out) {
  return IntInRange(int64_t{1} << 31, out);
}

bool FlagReader::NonNegativeInt(int& out) {
  std::string v;
  if (!Value(v)) return false;
  if (!absl::SimpleAtoi(v, &out) || out < 0) {
    return Invalid("must be an integer of at least 0", v);
  }
  return true;
}

bool FlagReader::IntInRange(int64_t max, int& out) {
  std::string v;
  if (!Value(v)) return false;
  if (!absl::SimpleAtoi(v, &out) || out <= 0 || out > max) {
    return Invalid(max >= (int64_t{1} << 31)
                       ? std::string("must be a positive integer")
                       : absl::StrCat("must be an integer from 1 to ", max),
                   v);
  }
  return true;
}

bool FlagReader::PositiveNumber(double& out) {
  std::string v;
  if (!Value(v)) return false;
  if (!absl::SimpleAtod(v, &out) || !(out > 0)) {
    return Invalid("must be a positive number", v);
  }
  return true;
}

bool FlagReader::PositiveIntList(std::vector<int>& out) {
  return List<int>(
      "must be positive integers separated by commas",
      [](absl::string_view s, int& n) {
        return absl::SimpleAtoi(s, &n) && n > 0;
      },
      out);
}

bool FlagReader::OneOf(std::initializer_list<absl::string_view> choices,
                       std::string& out) {
  std::string v;
  if (!Value(v)) return false;
  if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
    return Invalid(absl::StrCat("is one of ", absl::StrJoin(choices, ", ")), v);
  }
  out = v;
  return true;
}

bool FlagReader::SubsetOf(std::initializer_list<absl::string_view> choices,
                          std::set<std::string>& out) {
  std::vector<std::string> items;
  if (!List<std::string>(
          absl::StrCat("takes some of ", absl::StrJoin(choices, ","),
                       " separated by commas"),
          [&choices](absl::string_view s, std::string& item) {
            item = std::string(s);
            return std::find(choices.begin(), choices.end(), s) !=
                   choices.end();
          },
          items)) {
    return false;
  }
  out = std::set<std::string>(items.begin(), items.end());
  return true;
}

bool FlagReader::Invalid(absl::string_view problem, absl::string_view value) {
  return Fail(absl::StrCat(name_, " ", problem, ", got \"", value, "\""));
}

void FlagReader::Unknown() {
  Fail(absl::StrCat("unknown flag \"", name_, "\"; ", usage_));
}

bool FlagReader::Fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
  return false;
}

std::vector<absl::string_view> FlagReader::Items(
    absl::string_view value) const {
  return absl::StrSplit(value, ',', absl::SkipEmpty());
}

}  // namespace cohort::bench
