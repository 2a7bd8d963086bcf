// JSON helpers over nlohmann::json that report errors as absl::Status.
//
// Every helper takes a `what` naming where the JSON came from ("TF_CONFIG",
// "SM_HOSTS", "pod list from https://..."), so errors read like
//   TF_CONFIG: "task.index" must be an integer, got string "x"
//
// Thread safety: stateless functions; thread-safe.
#ifndef COHORT_BASE_JSON_H_
#define COHORT_BASE_JSON_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace cohort {

using Json = nlohmann::json;

// Parses `text`. InvalidArgument naming `what` and the byte offset on bad JSON.
absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what);

// "object", "array", "string", "integer", "number", "boolean" or "null".
const char* JsonTypeName(const Json& value);

// A short rendering of `value` for error messages (truncated past 80 chars).
std::string JsonPreview(const Json& value);

// Field accessors on a JSON object. `path` names the field in messages
// ("task.index"). A missing field gives nullopt; a present field of the wrong
// type gives InvalidArgument.
absl::StatusOr<std::optional<std::string>> JsonOptionalString(
    const Json& object, const char* key, absl::string_view what,
    absl::string_view path);
absl::StatusOr<std::optional<int64_t>> JsonOptionalInt(const Json& object,
                                                       const char* key,
                                                       absl::string_view what,
                                                       absl::string_view path);

// Lenient field readers, for records anyone may have written (a control
// plane's keys, a peer's message): a missing field, or one of another type,
// reads as `fallback`. They never throw (nlohmann's value() would).
std::string JsonStringOr(const Json& object, const char* key,
                         const std::string& fallback = "");
int64_t JsonIntOr(const Json& object, const char* key, int64_t fallback);
// Any non-negative integer (nlohmann keeps parsed ones unsigned).
uint64_t JsonUintOr(const Json& object, const char* key, uint64_t fallback);
bool JsonBoolOr(const Json& object, const char* key, bool fallback);

// Serialises compactly with keys in sorted order (nlohmann's default);
// invalid UTF-8 in strings becomes U+FFFD.
std::string JsonDump(const Json& value);

}  // namespace cohort

#endif  // COHORT_BASE_JSON_H_
