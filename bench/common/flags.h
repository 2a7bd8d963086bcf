// The flags of a `cohort bench` suite: "--name value" or "--name=value",
// read in order, each checked as it is read, with an error that names the
// flag, what it takes and what was given.
//
//   FlagReader flags(args, "flags: --reps 3 --sizes 2,8 --no-peer");
//   while (flags.Next()) {
//     if (flags.Is("--reps")) {
//       flags.PositiveInt(f.reps);
//     } else if (flags.Is("--no-peer")) {
//       flags.Switch(f.no_peer);
//     } else {
//       flags.Unknown();
//     }
//   }
//   if (!flags.ok()) ... flags.error() ...
//
// Every reader returns false (and records the error, which ends the loop)
// when the value is missing or malformed; the target is then unspecified.
#ifndef BENCH_COMMON_FLAGS_H_
#define BENCH_COMMON_FLAGS_H_

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cohort::bench {

class FlagReader {
 public:
  // `usage` ends the error of an unknown flag.
  FlagReader(std::vector<std::string> args, std::string usage);

  // Whether `name` is given anywhere (for flags such as --quick that set
  // defaults the others override).
  bool Has(absl::string_view name) const;

  // Moves to the next flag. False at the end, or once an error is recorded.
  bool Next();
  const std::string& name() const { return name_; }
  bool Is(absl::string_view name) const { return name_ == name; }

  // A flag without a value: sets `out`.
  bool Switch(bool& out);
  bool Value(std::string& out);
  bool PositiveInt(int& out);
  bool NonNegativeInt(int& out);
  // At least 1 and at most `max`.
  bool IntInRange(int64_t max, int& out);
  bool PositiveNumber(double& out);
  // "2,8,32": positive integers, at least one.
  bool PositiveIntList(std::vector<int>& out);
  // One of `choices`.
  bool OneOf(std::initializer_list<absl::string_view> choices,
             std::string& out);
  // A comma-separated subset of `choices`, at least one.
  bool SubsetOf(std::initializer_list<absl::string_view> choices,
                std::set<std::string>& out);
  // A comma-separated list of what `parse` accepts, at least one.
  template <typename T, typename Parse>
  bool List(absl::string_view what, Parse parse, std::vector<T>& out);

  // Records "<flag> <problem>, got "<value>"" and returns false.
  bool Invalid(absl::string_view problem, absl::string_view value);
  // Records that the current flag is unknown.
  void Unknown();

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  bool Fail(std::string message);
  std::vector<absl::string_view> Items(absl::string_view value) const;

  const std::vector<std::string> args_;
  const std::string usage_;
  size_t next_ = 0;
  std::string name_;
  bool has_inline_ = false;
  std::string inline_value_;
  std::string error_;
};

template <typename T, typename Parse>
bool FlagReader::List(absl::string_view what, Parse parse,
                      std::vector<T>& out) {
  std::string v;
  if (!Value(v)) return false;
  out.clear();
  for (absl::string_view item : Items(v)) {
    T parsed;
    if (!parse(item, parsed)) return Invalid(what, v);
    out.push_back(parsed);
  }
  if (out.empty()) return Invalid(what, v);
  return true;
}

}  // namespace cohort::bench

#endif  // BENCH_COMMON_FLAGS_H_
