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
}  // namespace cohort
