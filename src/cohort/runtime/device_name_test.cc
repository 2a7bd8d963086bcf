#include "cohort/runtime/device_name.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::StartsWith;

DeviceName MustParse(absl::string_view s) {
  auto d = DeviceName::Parse(s);
  EXPECT_TRUE(d.ok()) << s << ": " << d.status();
  return d.ok() ? *d : DeviceName();
}

TEST(DeviceNameTest, ParsesFullName) {
  DeviceName d = MustParse("/job:ps/replica:1/task:3/device:CPU:2");
  EXPECT_TRUE(d.has_job && d.has_replica && d.has_task && d.has_type &&
              d.has_id);
  EXPECT_EQ(d.job, "ps");
  EXPECT_EQ(d.replica, 1);
  EXPECT_EQ(d.task, 3);
  EXPECT_EQ(d.type, "CPU");
  EXPECT_EQ(d.id, 2);
  EXPECT_EQ(d.FullName(), "/job:ps/replica:1/task:3/device:CPU:2");
  EXPECT_EQ(d.TaskName(), "/job:ps/replica:1/task:3");
}

TEST(DeviceNameTest, ParsesPartialForms) {
  DeviceName empty = MustParse("");
  EXPECT_FALSE(empty.has_job || empty.has_replica || empty.has_task ||
               empty.has_type || empty.has_id);
  EXPECT_EQ(empty.FullName(), "");

  DeviceName job = MustParse("/job:ps");
  EXPECT_TRUE(job.has_job);
  EXPECT_FALSE(job.has_replica || job.has_task || job.has_type);
  EXPECT_EQ(job.FullName(), "/job:ps");

  DeviceName job_task = MustParse("/job:worker_2/task:1");
  EXPECT_EQ(job_task.job, "worker_2");
  EXPECT_FALSE(job_task.has_replica);
  EXPECT_TRUE(job_task.has_task);
  EXPECT_EQ(job_task.task, 1);
  EXPECT_EQ(job_task.FullName(), "/job:worker_2/task:1");

  DeviceName task = MustParse("/task:1");
  EXPECT_FALSE(task.has_job);
  EXPECT_EQ(task.task, 1);

  DeviceName dev = MustParse("/device:CPU:0");
  EXPECT_FALSE(dev.has_job || dev.has_task);
  EXPECT_TRUE(dev.has_type && dev.has_id);
  EXPECT_EQ(dev.FullName(), "/device:CPU:0");

  // A type without an id means "any id of that type".
  DeviceName any_gpu = MustParse("/job:w/device:GPU");
  EXPECT_TRUE(any_gpu.has_type);
  EXPECT_FALSE(any_gpu.has_id);
  EXPECT_EQ(any_gpu.FullName(), "/job:w/device:GPU");
}

TEST(DeviceNameTest, LegacyAndLowercaseTypesAreUpperCased) {
  DeviceName cpu = MustParse("/cpu:0");
  EXPECT_EQ(cpu.type, "CPU");
  EXPECT_EQ(cpu.id, 0);
  EXPECT_EQ(cpu.FullName(), "/device:CPU:0");

  DeviceName gpu = MustParse("/job:worker/replica:0/task:1/gpu:3");
  EXPECT_EQ(gpu.FullName(), "/job:worker/replica:0/task:1/device:GPU:3");

  EXPECT_EQ(MustParse("/device:cpu:1").FullName(), "/device:CPU:1");
  EXPECT_EQ(MustParse("/CPU:0").FullName(), "/device:CPU:0");
}

TEST(DeviceNameTest, WildcardsLeaveComponentsUnset) {
  DeviceName d = MustParse("/job:*/replica:*/task:*/device:CPU:*");
  EXPECT_FALSE(d.has_job || d.has_replica || d.has_task || d.has_id);
  EXPECT_TRUE(d.has_type);
  EXPECT_EQ(d.FullName(), "/device:CPU");
}

TEST(DeviceNameTest, RejectsMalformedStrings) {
  for (const char* bad : {
           "job:ps",                       // no leading slash
           "/",                            // nothing after the slash
           "/job:ps/",                     // trailing slash
           "//job:ps",                     // empty component
           "/job:",                        // empty job
           "/job:1ps",                     // job must start with a letter
           "/job:p-s",                     // bad character
           "/job:ps/task:-1",              // negative
           "/job:ps/task:+1",              // sign
           "/job:ps/task:x",               // not a number
           "/job:ps/task:99999999999999",  // overflows int
           "/job:ps/job:worker",           // repeated
           "/task:0/job:ps",               // out of order
           "/device:CPU:0/task:0",         // out of order
           "/job:ps/cpu",                  // legacy form needs an id
           "/ps",                          // a typo for /job:ps
           "/job:ps/tsk:0",                // a typo for task:0
           "/tpu:0",                       // legacy form is cpu/gpu only
           "/device:",                     // empty type
           "/device:CPU:0:1",              // too many parts
           "/device:CPU:x",                // bad id
           "/job:ps/replica:0/task:0/device:CPU:0/cpu:0",  // two devices
       }) {
    auto d = DeviceName::Parse(bad);
    ASSERT_FALSE(d.ok()) << bad << " parsed as " << d->FullName();
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(d.status().message()),
                StartsWith(std::string("invalid device string '") + bad + "'"));
  }
}

TEST(DeviceNameTest, CompleteFillsFromDefaultsThenFirstTaskCpu0) {
  DeviceName master_job;
  master_job.has_job = true;
  master_job.job = "worker";

  // What the placer does with partial names (reference §1.8).
  EXPECT_EQ(MustParse("").Complete(master_job).FullName(),
            "/job:worker/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(MustParse("/job:ps").Complete(master_job).FullName(),
            "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(MustParse("/task:2").Complete(master_job).FullName(),
            "/job:worker/replica:0/task:2/device:CPU:0");
  EXPECT_EQ(MustParse("/device:GPU:1").Complete(master_job).FullName(),
            "/job:worker/replica:0/task:0/device:GPU:1");
  // Set components are never overridden.
  EXPECT_EQ(MustParse("/job:ps/replica:0/task:3/device:CPU:0")
                .Complete(DeviceName::ForTask("worker", 1))
                .FullName(),
            "/job:ps/replica:0/task:3/device:CPU:0");
  // Every default component is used when set.
  EXPECT_EQ(MustParse("/job:ps")
                .Complete(DeviceName::ForTask("worker", 1))
                .FullName(),
            "/job:ps/replica:0/task:1/device:CPU:0");
  // No job anywhere: the job stays unset.
  DeviceName no_job = MustParse("/task:1").Complete(DeviceName());
  EXPECT_FALSE(no_job.has_job);
  EXPECT_EQ(no_job.FullName(), "/replica:0/task:1/device:CPU:0");
}

TEST(DeviceNameTest, ForTask) {
  DeviceName d = DeviceName::ForTask("ps", 2);
  EXPECT_EQ(d.FullName(), "/job:ps/replica:0/task:2/device:CPU:0");
  EXPECT_EQ(d.TaskName(), "/job:ps/replica:0/task:2");
}

TEST(DeviceNameTest, MatchesFollowsTheDeviceFilterRule) {
  DeviceName ps1 = DeviceName::ForTask("ps", 1);
  EXPECT_TRUE(ps1.Matches(MustParse("")));
  EXPECT_TRUE(ps1.Matches(MustParse("/job:ps")));
  EXPECT_TRUE(ps1.Matches(MustParse("/job:ps/task:1")));
  EXPECT_TRUE(ps1.Matches(MustParse("/job:ps/replica:0/task:1/cpu:0")));
  EXPECT_TRUE(ps1.Matches(MustParse("/device:CPU:0")));
  EXPECT_FALSE(ps1.Matches(MustParse("/job:worker")));
  EXPECT_FALSE(ps1.Matches(MustParse("/job:ps/task:0")));
  EXPECT_FALSE(ps1.Matches(MustParse("/job:ps/replica:1")));
  EXPECT_FALSE(ps1.Matches(MustParse("/device:GPU:0")));
  EXPECT_FALSE(ps1.Matches(MustParse("/device:CPU:1")));
  // A component the filter sets but the name lacks does not match.
  EXPECT_FALSE(MustParse("/job:ps").Matches(MustParse("/job:ps/task:0")));
  EXPECT_TRUE(MustParse("/job:ps/task:0").Matches(MustParse("/job:ps")));
}

TEST(DeviceNameTest, FullNameRoundTrips) {
  for (const char* s :
       {"/job:ps/replica:0/task:0/device:CPU:0", "/job:a", "/task:3",
        "/replica:2/device:GPU", "/job:w/task:1/device:CPU:7"}) {
    DeviceName d = MustParse(s);
    EXPECT_EQ(d.FullName(), s);
    DeviceName again = MustParse(d.FullName());
    EXPECT_EQ(again.FullName(), s);
    EXPECT_TRUE(again.Matches(d) && d.Matches(again)) << s;
  }
}

}  // namespace
}  // namespace cohort::runtime
