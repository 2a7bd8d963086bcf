#include "cohort/training/summary_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cohort/graph/crc32c.h"
#include "cohort/summary.pb.h"

namespace cohort::training {
namespace {

double WallTime(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

// A new event file in `dir`: TensorFlow's name, plus the pid, which keeps
// two writers of one second apart. Exclusive: an existing file is never
// appended to.
absl::StatusOr<std::pair<std::string, std::FILE*>> NewEventFile(
    std::string dir, absl::Time now) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the summary directory ", dir, ": ",
                     ec.message(), "; check that it is writable"));
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  std::string path = absl::StrFormat("%s/events.out.tfevents.%010d.%s.%d", dir,
                                     absl::ToUnixSeconds(now), host,
                                     static_cast<int>(getpid()));
  for (int n = 1; n < 100; ++n) {
    std::FILE* f = std::fopen(path.c_str(), "wbx");
    if (f != nullptr) return std::make_pair(path, f);
    if (errno != EEXIST) break;
    // The same second and process: a file this process made and lost.
    path = absl::StrFormat("%s/events.out.tfevents.%010d.%s.%d.%d", dir,
                           absl::ToUnixSeconds(now), host,
                           static_cast<int>(getpid()), n);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot create the event file ", path, ": ", std::strerror(errno)));
}

std::string FileVersionEvent(absl::Time now) {
  tensorboard::Event first;
  first.set_wall_time(WallTime(now));
  first.set_file_version("brain.Event:2");
  return first.SerializeAsString();
}

}  // namespace

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
    const std::string& dir, absl::Time now) {
  auto file = NewEventFile(dir, now);
  if (!file.ok()) return file.status();
  std::unique_ptr<EventFileWriter> w(
      new EventFileWriter(dir, file->first, file->second));
  absl::MutexLock lock(&w->mu_);
  if (absl::Status s = w->Write(FileVersionEvent(now), now); !s.ok()) return s;
  return w;
}

EventFileWriter::~EventFileWriter() {
  absl::MutexLock lock(&mu_);
  std::fclose(file_);
}

std::string EventFileWriter::path() const {
  absl::MutexLock lock(&mu_);
  return path_;
}

absl::Status EventFileWriter::Write(const std::string& event,
                                    absl::Time wall_time) {
  struct stat st;
  if (fstat(fileno(file_), &st) == 0 && st.st_nlink == 0) {
    // Deleted under us (a cleaned-up directory): a new file, which starts
    // with its own version event, as a reader expects.
    auto file = NewEventFile(dir_, wall_time);
    if (!file.ok()) return file.status();
    std::fclose(file_);
    path_ = file->first;
    file_ = file->second;
    std::string first;
    AppendTfRecord(FileVersionEvent(wall_time), &first);
    std::fwrite(first.data(), 1, first.size(), file_);
  }
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
    int64_t step, const std::vector<std::pair<std::string, float>>& values,
    absl::Time wall_time) {
  tensorboard::Event e;
  e.set_wall_time(WallTime(wall_time));
  e.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  absl::MutexLock lock(&mu_);
  return Write(e.SerializeAsString(), wall_time);
}

absl::Status EventFileWriter::AddSessionStart(int64_t step,
                                              absl::Time wall_time) {
  tensorboard::Event e;
  e.set_wall_time(WallTime(wall_time));
  e.set_step(step);
  e.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  absl::MutexLock lock(&mu_);
  return Write(e.SerializeAsString(), wall_time);
}

absl::StatusOr<std::shared_ptr<EventFileWriter>> SummaryWriterFor(
    const std::string& dir, absl::Time now) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* writers =
      new std::map<std::string, std::shared_ptr<EventFileWriter>>();
  std::string key = std::filesystem::path(dir).lexically_normal().string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  absl::MutexLock lock(&mu);
  auto it = writers->find(key);
  if (it != writers->end()) return it->second;
  auto created = EventFileWriter::Create(key, now);
  if (!created.ok()) return created.status();
  std::shared_ptr<EventFileWriter> w = std::move(*created);
  (*writers)[key] = w;
  return w;
}

}  // namespace cohort::training
