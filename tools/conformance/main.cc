// cohort_conformance [--allow-skips] FILE.jsonl
//
// Runs every case of FILE (one JSON object per line, format in
// docs/conformance.md) against the C++ cluster layer through
// the adapters of adapters.cc. Prints each failing case (its `source` and what
// differed) and each skipped case with the reason, then exactly one closing
// line "N passed, M failed, K skipped". Exits 0 only when M is 0 and K is 0
// (a skipped case is a behaviour nobody checked, so it must not pass
// silently); --allow-skips lets skipped cases through (M must still be 0).
// Exits 2 on bad usage or when the file cannot be read.
//
// A case may carry a "deviation" string: the project deliberately differs from
// upstream there and changed the expectation in its vendored copy; the runner
// prints the note (it never looks at which case it is).
//
// Comparison rules:
//   {"value": X}          the step succeeded and produced X (JSON equality;
//                         objects compare regardless of key order)
//                         A string with a "<...>" placeholder (e.g.
//                         "10.1.2.3:<port of locally started server>")
//                         matches any non-empty text in its place: the value
//                         is dynamic (an OS-chosen port).
//   {"ok": true}          the step succeeded
//   {"raises": E, "match": s}  the step failed with a status code that E maps
//                         to (below) and a message containing s
//
// Observation cases (the distribute coordinator's, docs/distribute.md)
// have no `expect.results`: `expect` itself lists
// what the test asserted ({"contexts": ..., "std_servers": ...} or
// {"raises": E, "match": s}). The adapter returns one step whose value is
// an object of everything it observed; each expected key must be there and
// match, where an expected object matches an actual one that has at least
// its keys (the test asserted those fields only). Annotation keys ("note",
// "derived_from_source", "*_derived") are not compared.
// Python exception -> status codes (reference §0):
//   ValueError, TypeError -> InvalidArgument; KeyError -> AlreadyExists;
//   RuntimeError -> FailedPrecondition or Unavailable; AssertionError ->
//   FailedPrecondition; NotImplementedError -> Unimplemented; ImportError ->
//   FailedPrecondition.
// TensorFlow's own errors (tf.errors.XError, raised by the C++ runtime, e.g.
// Server's InvalidArgumentError for an address without a port) -> the code of
// the same name: OpError's codes are absl's, one code each. Where cohort
// deliberately answers another code (TensorFlow's server answers a port it
// cannot bind with UnknownError, cohort with Unavailable naming host:port),
// the case's expectation is changed and carries a "deviation" note.
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "tools/conformance/adapters.h"

namespace cohort::conformance {
namespace {

bool CodesFor(const std::string& exception, std::set<absl::StatusCode>* codes) {
  using C = absl::StatusCode;
  if (exception == "ValueError" || exception == "TypeError") {
    *codes = {C::kInvalidArgument};
  } else if (exception == "KeyError") {
    *codes = {C::kAlreadyExists};
  } else if (exception == "RuntimeError") {
    *codes = {C::kFailedPrecondition, C::kUnavailable};
  } else if (exception == "AssertionError" || exception == "ImportError") {
    *codes = {C::kFailedPrecondition};
  } else if (exception == "NotImplementedError") {
    *codes = {C::kUnimplemented};
  } else {
    std::optional<absl::StatusCode> code = TfErrorCode(exception);
    if (!code) return false;
    *codes = {*code};
  }
  return true;
}

std::string Describe(const StepOutcome& outcome) {
  if (!outcome.status.ok()) {
    return absl::StrCat("error ", StatusCodeName(outcome.status.code()), ": ",
                        outcome.status.message());
  }
  if (outcome.value) return absl::StrCat("value ", outcome.value->dump());
  return "ok (no value)";
}

// JSON equality, except that an expected string containing "<...>" matches
// an actual string with the same text before and after the placeholder and
// something non-empty in its place.
bool JsonMatches(const Json& expected, const Json& actual) {
  if (expected.is_string() && actual.is_string()) {
    const std::string& e = expected.get_ref<const std::string&>();
    const std::string& a = actual.get_ref<const std::string&>();
    const size_t open = e.find('<');
    const size_t close = open == std::string::npos ? open : e.find('>', open);
    if (close == std::string::npos) return e == a;
    const std::string prefix = e.substr(0, open), suffix = e.substr(close + 1);
    return a.size() > prefix.size() + suffix.size() &&
           absl::StartsWith(a, prefix) && absl::EndsWith(a, suffix);
  }
  if (expected.is_array() && actual.is_array()) {
    if (expected.size() != actual.size()) return false;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (!JsonMatches(expected[i], actual[i])) return false;
    }
    return true;
  }
  if (expected.is_object() && actual.is_object()) {
    if (expected.size() != actual.size()) return false;
    for (const auto& [key, value] : expected.items()) {
      auto it = actual.find(key);
      if (it == actual.end() || !JsonMatches(value, *it)) return false;
    }
    return true;
  }
  return expected == actual;
}

// "" when `outcome` satisfies `expected`, else what differed.
std::string Compare(const Json& expected, const StepOutcome& outcome) {
  if (expected.contains("raises")) {
    const std::string exception = expected["raises"].is_string()
                                      ? expected["raises"].get<std::string>()
                                      : "";
    std::set<absl::StatusCode> codes;
    if (!CodesFor(exception, &codes)) {
      return absl::StrCat("the runner has no status mapping for exception '",
                          exception, "'");
    }
    if (outcome.status.ok()) {
      return absl::StrCat("expected ", exception, ", got ", Describe(outcome));
    }
    if (codes.count(outcome.status.code()) == 0) {
      return absl::StrCat("expected ", exception, " (status ",
                          StatusCodeName(*codes.begin()), "), got ",
                          Describe(outcome));
    }
    if (expected.contains("match") && expected["match"].is_string()) {
      const std::string match = expected["match"];
      if (!absl::StrContains(outcome.status.message(), match)) {
        return absl::StrCat("expected ", exception, " matching \"", match,
                            "\", got ", Describe(outcome));
      }
    }
    return "";
  }
  if (expected.contains("value")) {
    if (!outcome.status.ok() || !outcome.value ||
        !JsonMatches(expected["value"], *outcome.value)) {
      return absl::StrCat("expected value ", expected["value"].dump(), ", got ",
                          Describe(outcome));
    }
    return "";
  }
  if (expected.contains("ok")) {
    if (!outcome.status.ok()) {
      return absl::StrCat("expected success, got ", Describe(outcome));
    }
    return "";
  }
  return absl::StrCat("the runner does not understand the expected result ",
                      expected.dump());
}

bool IsAnnotation(const std::string& key) {
  return key == "note" || key == "derived_from_source" ||
         absl::EndsWith(key, "_derived");
}

// JsonMatches, except that an expected object needs only its own
// (non-annotation) keys in the actual one.
bool ObservedMatches(const Json& expected, const Json& actual) {
  if (expected.is_object() && actual.is_object()) {
    for (const auto& [key, value] : expected.items()) {
      if (IsAnnotation(key)) continue;
      auto it = actual.find(key);
      if (it == actual.end() || !ObservedMatches(value, *it)) return false;
    }
    return true;
  }
  if (expected.is_array() && actual.is_array()) {
    if (expected.size() != actual.size()) return false;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (!ObservedMatches(expected[i], actual[i])) return false;
    }
    return true;
  }
  return JsonMatches(expected, actual);
}

// What differed between an observation case's `expect` and the adapter's
// steps (empty when nothing did).
std::vector<std::string> CompareObservations(
    const Json& expect, const std::vector<StepOutcome>& steps) {
  if (steps.size() != 1) {
    return {
        absl::StrCat("an observation case needs one step, the adapter "
                     "produced ",
                     steps.size())};
  }
  const StepOutcome& outcome = steps[0];
  if (expect.contains("raises")) {
    std::string diff = Compare(expect, outcome);
    if (diff.empty()) return {};
    return {diff};
  }
  if (!outcome.status.ok() || !outcome.value || !outcome.value->is_object()) {
    return {absl::StrCat("expected observations, got ", Describe(outcome))};
  }
  std::vector<std::string> diffs;
  int compared = 0;
  for (const auto& [key, value] : expect.items()) {
    if (IsAnnotation(key)) continue;
    ++compared;
    auto it = outcome.value->find(key);
    if (it == outcome.value->end()) {
      diffs.push_back(absl::StrCat("the adapter reports no \"", key,
                                   "\" (expected ", value.dump(), ")"));
    } else if (!ObservedMatches(value, *it)) {
      diffs.push_back(
          absl::StrCat(key, ": expected ", value.dump(), ", got ", it->dump()));
    }
  }
  // A case that only annotates checks nothing: a fault in the case file.
  if (compared == 0) diffs.push_back("the case's expect has nothing to check");
  return diffs;
}

int Main(int argc, char** argv) {
  bool allow_skips = false;
  const char* path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--allow-skips") {
      allow_skips = true;
    } else if (path == nullptr && !absl::StartsWith(arg, "--")) {
      path = argv[i];
    } else {
      path = nullptr;
      break;
    }
  }
  if (path == nullptr) {
    std::cerr << "usage: cohort_conformance [--allow-skips] FILE.jsonl\n";
    return 2;
  }
  std::ifstream file(path);
  if (!file) {
    std::cerr << "cohort_conformance: cannot read " << path
              << "; pass a JSON-lines file of conformance cases\n";
    return 2;
  }
  AdapterRegistry registry;
  RegisterAllAdapters(&registry);

  int passed = 0, failed = 0, skipped = 0;
  std::string line;
  int line_number = 0;
  while (std::getline(file, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = ParseJson(line, absl::StrCat(path, ":", line_number));
    if (!parsed.ok() || !parsed->is_object()) {
      ++failed;
      std::cout << "FAIL line " << line_number << ": "
                << (parsed.ok() ? "not a JSON object"
                                : std::string(parsed.status().message()))
                << "\n";
      continue;
    }
    const Json& test_case = *parsed;
    const std::string source = test_case.value("source", "<no source>");
    const std::string label = absl::StrCat(source, " (line ", line_number, ")");
    const std::string resolver =
        test_case.contains("resolver") && test_case["resolver"].is_string()
            ? test_case["resolver"].get<std::string>()
            : "";
    const Adapter* adapter = registry.Find(resolver);
    if (adapter == nullptr) {
      ++skipped;
      std::cout << "SKIP " << label << ": no adapter for resolver " << resolver
                << " (that part of cohort is not built yet)\n";
      continue;
    }
    const Json& input = Field(test_case, "input");
    CaseContext ctx(input, &registry);
    {
      nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(
          line, /*cb=*/nullptr, /*allow_exceptions=*/false);
      if (ordered.is_object() && ordered.contains("input")) {
        ctx.set_ordered_input(ordered["input"]);
      }
    }
    CaseRun run = adapter->Run(test_case, ctx);
    if (run.skip_reason) {
      ++skipped;
      std::cout << "SKIP " << label << ": " << *run.skip_reason << "\n";
      continue;
    }
    const Json& expect = Field(test_case, "expect");
    const Json& results = Field(expect, "results");
    std::vector<std::string> diffs;
    if (!results.is_array() && expect.is_object() && !expect.empty() &&
        !expect.contains("results")) {
      diffs = CompareObservations(expect, run.steps);
    } else if (!results.is_array()) {
      diffs.push_back("the case has no expect.results list");
    } else {
      if (results.size() != run.steps.size()) {
        diffs.push_back(absl::StrCat("expected ", results.size(),
                                     " results, the adapter produced ",
                                     run.steps.size()));
      }
      const Json& calls = Field(input, "calls");
      for (size_t i = 0; i < results.size() && i < run.steps.size(); ++i) {
        std::string diff = Compare(results[i], run.steps[i]);
        if (diff.empty()) continue;
        std::string step = calls.is_array() && i < calls.size()
                               ? calls[i].dump()
                               : std::string("(case input)");
        diffs.push_back(absl::StrCat("step ", i, " ", step, ": ", diff));
      }
    }
    if (diffs.empty()) {
      ++passed;
      if (test_case.contains("deviation")) {
        // A case whose expectation the project changed on purpose.
        std::cout << "NOTE " << label << ": deviates from upstream on purpose: "
                  << test_case["deviation"].dump() << "\n";
      }
      continue;
    }
    ++failed;
    std::cout << "FAIL " << label << "\n";
    for (const std::string& d : diffs) std::cout << "  " << d << "\n";
    if (test_case.contains("deviation")) {
      std::cout << "  deviation noted in the case: "
                << test_case["deviation"].dump() << "\n";
    }
  }
  std::cout << passed << " passed, " << failed << " failed, " << skipped
            << " skipped" << std::endl;
  if (failed != 0) return 1;
  if (skipped != 0 && !allow_skips) {
    std::cerr << "cohort_conformance: " << skipped << " case(s) of " << path
              << " skipped (see the SKIP lines): a skipped case checks "
                 "nothing; build the missing adapter, or pass --allow-skips "
                 "to accept them\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace cohort::conformance

int main(int argc, char** argv) {
  return cohort::conformance::Main(argc, argv);
}
