#include "cohort/base/json.h"

#include "absl/strings/str_cat.h"

namespace cohort {

// nlohmann's non-throwing parse says only that the text is invalid; the
// error a user needs (where, and why) comes from a second, SAX parse, paid
// only on the error path. The message quotes the start of the text, capped,
// because it may come from a file or a peer.
absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what) {
  Json value = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                           /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    // Re-parse through the SAX interface to learn where it went wrong.
    struct ErrorFinder : nlohmann::json_sax<Json> {
      size_t position = 0;
      std::string message;
      bool null() override { return true; }
      bool boolean(bool) override { return true; }
      bool number_integer(number_integer_t) override { return true; }
      bool number_unsigned(number_unsigned_t) override { return true; }
      bool number_float(number_float_t, const string_t&) override {
        return true;
      }
      bool string(string_t&) override { return true; }
      bool binary(binary_t&) override { return true; }
      bool start_object(std::size_t) override { return true; }
      bool key(string_t&) override { return true; }
      bool end_object() override { return true; }
      bool start_array(std::size_t) override { return true; }
      bool end_array() override { return true; }
      bool parse_error(std::size_t pos, const std::string&,
                       const nlohmann::detail::exception& e) override {
        position = pos;
        message = e.what();
        return false;
      }
    } finder;
    Json::sax_parse(text.begin(), text.end(), &finder);
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is not valid JSON (error near byte ", finder.position, ": ",
        finder.message, "); got: ", text.substr(0, 120)));
  }
  return value;
}

const char* JsonTypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::null:
      return "null";
    default:
      return "value";
  }
}

// Error messages quote the offending value, but never a whole document.
std::string JsonPreview(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = absl::StrCat(text.substr(0, 77), "...");
  return text;
}

namespace {
absl::Status WrongType(const Json& field, absl::string_view what,
                       absl::string_view path, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": \"", path, "\" must be ", expected, ", got ",
                   JsonTypeName(field), " ", JsonPreview(field)));
}
}  // namespace

absl::StatusOr<std::optional<std::string>> JsonOptionalString(
    const Json& object, const char* key, absl::string_view what,
    absl::string_view path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return WrongType(*it, what, path, "a string");
  return std::optional<std::string>(it->get<std::string>());
}

absl::StatusOr<std::optional<int64_t>> JsonOptionalInt(const Json& object,
                                                       const char* key,
                                                       absl::string_view what,
                                                       absl::string_view path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) return WrongType(*it, what, path, "an integer");
  return std::optional<int64_t>(it->get<int64_t>());
}

std::string JsonStringOr(const Json& object, const char* key,
                         const std::string& fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>()
                                               : fallback;
}

int64_t JsonIntOr(const Json& object, const char* key, int64_t fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>()
                                                       : fallback;
}

uint64_t JsonUintOr(const Json& object, const char* key, uint64_t fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return fallback;
  // Parsed text holds 7 as unsigned; a value built in C++ as signed.
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  const int64_t value = it->get<int64_t>();
  return value >= 0 ? static_cast<uint64_t>(value) : fallback;
}

bool JsonBoolOr(const Json& object, const char* key, bool fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string JsonDump(const Json& value) {
  // Invalid UTF-8 in a string (a message cut mid-character, bytes from a
  // peer) becomes U+FFFD instead of an exception.
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace cohort
