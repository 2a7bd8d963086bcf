#include "cohort/cluster/resolvers/slurm_hostlist.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace cohort {
namespace {

constexpr char kHostlistGrammar[] =
    "expected comma-separated items of the form prefix or "
    "prefix[N,A-B,...] (one bracket group at the end of each item, decimal "
    "numbers, inclusive ranges), e.g. \"n[01-04,7],gpu5\"";

constexpr char kTasksPerNodeGrammar[] =
    "expected a comma-separated list of C or C(xR) (C tasks on each of R "
    "nodes), e.g. \"3(x2),2,1\"";

absl::Status HostlistError(absl::string_view hostlist,
                           absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrFormat("Invalid hostlist format \"%s\": %s; %s",
                      std::string(hostlist), reason, kHostlistGrammar));
}

absl::Status TasksError(absl::string_view value, absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrFormat("Invalid tasks-per-node list format \"%s\": %s; %s",
                      std::string(value), reason, kTasksPerNodeGrammar));
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Parses a decimal number of at most 18 digits (after leading zeros).
bool ParseNumber(absl::string_view s, int64_t* out) {
  if (!AllDigits(s)) return false;
  size_t first = s.find_first_not_of('0');
  if (first != absl::string_view::npos && s.size() - first > 18) return false;
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  *out = v;
  return true;
}

std::string Padded(int64_t value, size_t width) {
  std::string digits = absl::StrCat(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(
    absl::string_view hostlist) {
  std::vector<std::string> hosts;
  if (hostlist.empty()) return hosts;

  // Split into items at commas outside brackets.
  std::vector<absl::string_view> items;
  bool in_brackets = false;
  size_t start = 0;
  for (size_t i = 0; i < hostlist.size(); ++i) {
    char c = hostlist[i];
    if (in_brackets) {
      if (c == '[') {
        return HostlistError(hostlist,
                             absl::StrCat("nested '[' at offset ", i));
      }
      if (c == ']') in_brackets = false;
    } else if (c == '[') {
      in_brackets = true;
    } else if (c == ',') {
      items.push_back(hostlist.substr(start, i - start));
      start = i + 1;
    }
  }
  if (in_brackets) return HostlistError(hostlist, "unterminated '['");
  items.push_back(hostlist.substr(start));

  for (absl::string_view item : items) {
    if (item.empty()) return HostlistError(hostlist, "empty item");
    size_t open = item.find('[');
    if (open == absl::string_view::npos) {
      if (item.find(']') != absl::string_view::npos) {
        return HostlistError(
            hostlist, absl::StrCat("unmatched ']' in item \"", item, "\""));
      }
      hosts.emplace_back(item);
      if (static_cast<int64_t>(hosts.size()) > kMaxExpandedEntries) {
        return HostlistError(
            hostlist, absl::StrCat("expands to more than ", kMaxExpandedEntries,
                                   " hosts"));
      }
      continue;
    }
    absl::string_view prefix = item.substr(0, open);
    if (prefix.find(']') != absl::string_view::npos) {
      return HostlistError(
          hostlist, absl::StrCat("unmatched ']' in item \"", item, "\""));
    }
    size_t close = item.find(']', open);
    // The splitter guarantees a matching ']' exists.
    if (close != item.size() - 1) {
      return HostlistError(
          hostlist,
          absl::StrCat("text after the bracket group in item \"", item, "\""));
    }
    absl::string_view body = item.substr(open + 1, close - open - 1);
    if (body.empty()) {
      return HostlistError(
          hostlist, absl::StrCat("empty brackets in item \"", item, "\""));
    }
    for (absl::string_view part : absl::StrSplit(body, ',')) {
      std::vector<absl::string_view> bounds = absl::StrSplit(part, '-');
      int64_t lo = 0, hi = 0;
      if (bounds.size() > 2 || !ParseNumber(bounds[0], &lo) ||
          (bounds.size() == 2 && !ParseNumber(bounds[1], &hi))) {
        return HostlistError(hostlist,
                             absl::StrCat("\"", part, "\" in item \"", item,
                                          "\" is not N or A-B"));
      }
      if (bounds.size() == 1) hi = lo;
      if (hi < lo) {
        return HostlistError(
            hostlist, absl::StrCat("descending range \"", part, "\" in item \"",
                                   item, "\""));
      }
      if (hi - lo >= kMaxExpandedEntries - static_cast<int64_t>(hosts.size())) {
        return HostlistError(
            hostlist, absl::StrCat("expands to more than ", kMaxExpandedEntries,
                                   " hosts"));
      }
      size_t width = bounds[0].size();
      for (int64_t v = lo; v <= hi; ++v) {
        hosts.push_back(absl::StrCat(prefix, Padded(v, width)));
      }
    }
  }
  return hosts;
}

absl::StatusOr<std::vector<int>> ExpandTasksPerNode(
    absl::string_view tasks_per_node) {
  std::vector<int> counts;
  if (tasks_per_node.empty()) return TasksError(tasks_per_node, "empty value");
  for (absl::string_view item : absl::StrSplit(tasks_per_node, ',')) {
    absl::string_view count_text = item;
    absl::string_view repeat_text;
    size_t paren = item.find('(');
    if (paren != absl::string_view::npos) {
      count_text = item.substr(0, paren);
      absl::string_view rest = item.substr(paren);
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') {
        return TasksError(tasks_per_node,
                          absl::StrCat("\"", item, "\" is not C or C(xR)"));
      }
      repeat_text = rest.substr(2, rest.size() - 3);
    }
    int64_t count = 0;
    int64_t repeat = 1;
    if (!ParseNumber(count_text, &count) ||
        (paren != absl::string_view::npos &&
         !ParseNumber(repeat_text, &repeat))) {
      return TasksError(tasks_per_node,
                        absl::StrCat("\"", item, "\" is not C or C(xR)"));
    }
    if (count > (int64_t{1} << 30)) {
      return TasksError(tasks_per_node, absl::StrCat("task count ", count_text,
                                                     " is too large"));
    }
    if (repeat > kMaxExpandedEntries - static_cast<int64_t>(counts.size())) {
      return TasksError(
          tasks_per_node,
          absl::StrCat("expands to more than ", kMaxExpandedEntries, " nodes"));
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat),
                  static_cast<int>(count));
  }
  return counts;
}

}  // namespace cohort
