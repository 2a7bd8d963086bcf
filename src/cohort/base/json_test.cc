#include "cohort/base/json.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

TEST(ParseJson, ReportsSourceAndPosition) {
  auto bad = ParseJson("{\"a\": ", "TF_CONFIG");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("TF_CONFIG is not valid JSON"));
  EXPECT_THAT(bad.status().message(), HasSubstr("byte"));
}

TEST(ParseJson, ParsesObjects) {
  auto ok = ParseJson(R"({"a": [1, 2]})", "x");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["a"][1], 2);
}

TEST(JsonOptional, TypeErrorsNameTheField) {
  Json object = Json::parse(R"({"index": "x", "type": "worker"})");
  auto index = JsonOptionalInt(object, "index", "TF_CONFIG", "task.index");
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(index.status().message(),
              HasSubstr("\"task.index\" must be an integer, got string \"x\""));
  auto type = JsonOptionalString(object, "type", "TF_CONFIG", "task.type");
  ASSERT_TRUE(type.ok());
  EXPECT_EQ(type->value(), "worker");
  auto missing = JsonOptionalString(object, "nope", "TF_CONFIG", "nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

}  // namespace
// Records anyone may write: a field of the wrong type, a missing one, or a
// value that is no object reads as the fallback, and nothing throws.
TEST(JsonLenient, WrongTypesAndMissingFieldsReadAsTheFallback) {
  const Json j = {{"s", "text"},
                  {"i", -3},
                  {"u", 7},
                  {"b", true},
                  {"wrong", Json::array({1, 2})}};
  EXPECT_EQ(JsonStringOr(j, "s"), "text");
  EXPECT_EQ(JsonIntOr(j, "i", 0), -3);
  EXPECT_EQ(JsonUintOr(j, "u", 0), 7u);
  EXPECT_TRUE(JsonBoolOr(j, "b", false));
  EXPECT_EQ(JsonStringOr(j, "wrong", "fb"), "fb");
  EXPECT_EQ(JsonIntOr(j, "s", 5), 5);
  EXPECT_EQ(JsonUintOr(j, "i", 9), 9u);  // negative: not unsigned
  EXPECT_EQ(
      JsonUintOr(*ParseJson(R"({"u": 18446744073709551615})", "t"), "u", 0),
      18446744073709551615u);
  EXPECT_FALSE(JsonBoolOr(j, "i", false));
  EXPECT_EQ(JsonStringOr(j, "missing", "fb"), "fb");
  EXPECT_EQ(JsonIntOr(Json::array({1}), "i", 4), 4);
  EXPECT_EQ(JsonStringOr(Json("scalar"), "s", "fb"), "fb");
}

}  // namespace cohort
