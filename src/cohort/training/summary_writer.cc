#include "cohort/training/summary_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/graph/crc32c.h"
#include "cohort/summary.pb.h"

namespace cohort::training {

void AppendTfRecord(absl::string_view data, std::string* out) {
  char header[12];
  absl::little_endian::Store64(header, data.size());
  absl::little_endian::Store32(header + 8,
                               crc32c::Mask(crc32c::Value(header, 8)));
  char footer[4];
  absl::little_endian::Store32(
      footer, crc32c::Mask(crc32c::Value(data.data(), data.size())));
  out->append(header, sizeof(header));
  out->append(data.data(), data.size());
  out->append(footer, sizeof(footer));
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& dir, Env* env) {
  if (env == nullptr) env = Env::Default();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the summary directory ", dir, ": ",
                     ec.message(), "; check that it is writable"));
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  const absl::Time now = env->Now();
  // TensorFlow's name; the pid keeps two writers of one second apart.
  std::string path = absl::StrFormat("%s/events.out.tfevents.%010d.%s.%d", dir,
                                     absl::ToUnixSeconds(now), host,
                                     static_cast<int>(getpid()));
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the event file ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(env, path, f));
  tensorboard::Event first;
  first.set_wall_time(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  first.set_file_version("brain.Event:2");
  absl::MutexLock lock(&w->mu_);
  if (absl::Status s = w->WriteEvent(first.SerializeAsString()); !s.ok()) {
    return s;
  }
  return w;
}

EventFileWriter::~EventFileWriter() {
  absl::MutexLock lock(&mu_);
  std::fclose(file_);
}

absl::Status EventFileWriter::WriteEvent(const std::string& event) {
  std::string record;
  AppendTfRecord(event, &record);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write the event file ",
                                            path_, ": ", std::strerror(errno),
                                            "; check the disk"));
  }
  return absl::OkStatus();
}

absl::Status EventFileWriter::AddScalars(
    int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  tensorboard::Event e;
  e.set_wall_time(absl::ToDoubleSeconds(env_->Now() - absl::UnixEpoch()));
  e.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  absl::MutexLock lock(&mu_);
  return WriteEvent(e.SerializeAsString());
}

absl::StatusOr<std::shared_ptr<EventFileWriter>> SummaryWriterFor(
    const std::string& dir, Env* env) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* writers ABSL_GUARDED_BY(mu) =
      new std::map<std::string, std::shared_ptr<EventFileWriter>>();
  const std::string key =
      std::filesystem::path(dir).lexically_normal().string();
  absl::MutexLock lock(&mu);
  auto it = writers->find(key);
  if (it != writers->end()) return it->second;
  std::shared_ptr<EventFileWriter> w;
  {
    auto created = EventFileWriter::Create(dir, env);
    if (!created.ok()) return created.status();
    w = std::move(*created);
  }
  (*writers)[key] = w;
  return w;
}

}  // namespace cohort::training
