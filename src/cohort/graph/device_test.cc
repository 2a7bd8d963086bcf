#include "cohort/graph/device.h"

#include "gtest/gtest.h"

namespace cohort {
namespace {

// Incarnations tell a restarted task from its predecessor (docs/runtime.md):
// never zero (zero means "none" in Send/Recv attrs), and two Devices, even of
// the same name, get different ones.
TEST(DeviceTest, IncarnationIsRandomAndNonZero) {
  const std::string name = "/job:worker/replica:0/task:0/device:CPU:0";
  Device a(name, 1);
  Device b(name, 1);
  EXPECT_NE(a.incarnation(), 0u);
  EXPECT_NE(b.incarnation(), 0u);
  EXPECT_NE(a.incarnation(), b.incarnation());
  // Fixed for the Device's lifetime.
  EXPECT_EQ(a.incarnation(), a.incarnation());
}

TEST(DeviceTest, ExplicitIncarnationIsKept) {
  Device d("/job:ps/replica:0/task:0/device:CPU:0", 1, 0xfeedbeef12345678ull);
  EXPECT_EQ(d.incarnation(), 0xfeedbeef12345678ull);
  EXPECT_EQ(d.name(), "/job:ps/replica:0/task:0/device:CPU:0");
  // Zero asks for a random one.
  Device r("/job:ps/replica:0/task:0/device:CPU:0", 1, 0);
  EXPECT_NE(r.incarnation(), 0u);
}

}  // namespace
}  // namespace cohort
