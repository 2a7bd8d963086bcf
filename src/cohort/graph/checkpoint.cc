#include "cohort/graph/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"
#include "cohort/graph/crc32c.h"

namespace cohort {
namespace {

constexpr char kMagic[] = "COHORTCKPT1\n";  // 12 bytes
constexpr size_t kMagicLen = 12;
constexpr char kFooter[] = "CKPTEND\n";  // 8 bytes
constexpr size_t kFooterLen = 8;

void PutU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLE(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " '", path, "': ", std::strerror(errno)));
}

// Temporaries this process is writing now: RemoveStaleTempFiles must not
// take them for a crashed writer's when a restarted task got the pid of
// its predecessor (common in containers).
absl::Mutex in_flight_mu;
absl::flat_hash_set<std::string>& InFlight()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(in_flight_mu) {
  static auto* names = new absl::flat_hash_set<std::string>;
  return *names;
}

class InFlightTemp {
 public:
  explicit InFlightTemp(std::string path) : path_(std::move(path)) {
    absl::MutexLock lock(&in_flight_mu);
    InFlight().insert(path_);
  }
  ~InFlightTemp() {
    absl::MutexLock lock(&in_flight_mu);
    InFlight().erase(path_);
  }

 private:
  const std::string path_;
};

// The pid in "<name>.tmp-<pid>-<n>", or 0 when `name` is not one.
pid_t TempFilePid(absl::string_view name) {
  const size_t tmp = name.rfind(".tmp-");
  if (tmp == absl::string_view::npos || tmp == 0) return 0;
  absl::string_view rest = name.substr(tmp + 5);
  const size_t dash = rest.find('-');
  if (dash == absl::string_view::npos) return 0;
  int64_t pid = 0;
  uint64_t n = 0;
  if (!absl::SimpleAtoi(rest.substr(0, dash), &pid) ||
      !absl::SimpleAtoi(rest.substr(dash + 1), &n) || pid <= 0 ||
      rest.substr(0, dash).find_first_not_of("0123456789") !=
          absl::string_view::npos ||
      rest.substr(dash + 1).find_first_not_of("0123456789") !=
          absl::string_view::npos) {
    return 0;
  }
  return static_cast<pid_t>(pid);
}

}  // namespace

int RemoveStaleTempFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> stale;
  while (struct dirent* e = ::readdir(d)) {
    const pid_t pid = TempFilePid(e->d_name);
    if (pid == 0) continue;
    // Another live process may be writing it (two savers, or a pid reused
    // by an unrelated process): only a writer that is gone left it for good.
    if (pid != ::getpid() && (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
    stale.push_back(CheckpointPath(dir, e->d_name));
  }
  ::closedir(d);
  int removed = 0;
  for (const std::string& path : stale) {
    {
      absl::MutexLock lock(&in_flight_mu);
      if (InFlight().contains(path)) continue;
    }
    struct stat st;
    // Regular files only: never follow a link someone put there.
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  return removed;
}

absl::Status CreateCheckpointDirectory(const std::string& dir,
                                       const std::string& flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", flag, " ", dir, ": ", ec.message()));
  }
  return CheckCheckpointDirectory(dir);
}

absl::Status CheckCheckpointDirectory(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint directory '", dir, "' does not exist"));
    }
    return IoError("cannot stat checkpoint directory", dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint directory '", dir, "' is not a directory"));
  }
  const uid_t me = ::getuid();
  auto owner_name = [](uid_t uid) {
    struct passwd pw;
    struct passwd* found = nullptr;
    char buf[1024];
    if (::getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 &&
        found != nullptr) {
      return absl::StrCat(found->pw_name, " (uid ", uid, ")");
    }
    return absl::StrCat("uid ", uid);
  };
  // As sshd's StrictModes: owned by this user or root, and writable by no
  // one else. The sticky bit is no exception: it stops others deleting our
  // files, not planting a checkpoint (or a pointer file) that would be
  // restored into the model.
  if (st.st_uid != me && st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint directory '", dir, "' is owned by ", owner_name(st.st_uid),
        ", not by this user (", owner_name(me),
        "): its owner could plant a checkpoint to be restored; use a "
        "directory of your own"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "checkpoint directory '%s' (owner %s) has mode %04o: writable by "
        "%s, who could plant a checkpoint to be restored or delete saved "
        "ones; run `chmod go-w %s` or use a directory of your own",
        dir, owner_name(st.st_uid), st.st_mode & 07777,
        (st.st_mode & S_IWOTH) != 0 ? "every user" : "its group", dir));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents) {
  std::random_device rd;
  std::string tmp = absl::StrCat(path, ".tmp-", getpid(), "-", rd());
  InFlightTemp in_flight(tmp);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create", tmp);
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = IoError("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = IoError("cannot fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return IoError("cannot close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = IoError(absl::StrCat("cannot rename ", tmp, " to"), path);
    ::unlink(tmp.c_str());
    return s;
  }
  std::string dir = Dirname(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // Best effort: makes the rename durable.
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteCheckpointFile(const std::string& path,
                                 const CheckpointEntries& entries) {
  std::string out(kMagic, kMagicLen);
  PutU32(&out, static_cast<uint32_t>(entries.size()));
  PutU32(&out, crc32c::Mask(crc32c::Value(out.data(), out.size())));
  std::string payload;
  for (const auto& [name, tensor] : entries) {
    TensorProto proto;
    tensor.AsProto(&proto);
    payload.clear();
    if (!proto.SerializeToString(&payload)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint '", path, "': cannot serialize variable '", name, "' (",
          tensor.TotalBytes(), " bytes; over 2 GiB?)"));
    }
    size_t start = out.size();
    PutU32(&out, static_cast<uint32_t>(name.size()));
    out += name;
    PutU64(&out, payload.size());
    out += payload;
    PutU32(&out,
           crc32c::Mask(crc32c::Value(out.data() + start, out.size() - start)));
  }
  out.append(kFooter, kFooterLen);
  // A save that crashed between creating its temporary and renaming it
  // left the temporary behind; each later save in the directory sweeps.
  RemoveStaleTempFiles(Dirname(path));
  return WriteFileAtomically(path, out);
}

absl::StatusOr<CheckpointEntries> ReadCheckpointFile(const std::string& path,
                                                     MemoryBudget* budget) {
  if (budget == nullptr) budget = MemoryBudget::Process();
  // Only a regular file: a FIFO would hang the reader and a device such as
  // /dev/zero would never end.
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint '", path, "' does not exist"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint '", path, "' is not a regular file; check the path"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint '", path, "' cannot be opened"));
  }
  // The whole file is read into memory: its size (which a sparse file
  // makes anything) is charged first, so a huge file is an error naming it
  // and not a failed allocation.
  const int64_t file_bytes = static_cast<int64_t>(st.st_size);
  absl::Status charged = budget->Charge(
      file_bytes, absl::StrCat("reading checkpoint '", path, "' (", file_bytes,
                               " bytes on disk)"));
  if (!charged.ok()) return charged;
  struct Uncharge {
    MemoryBudget* budget;
    int64_t bytes;
    ~Uncharge() { budget->Release(bytes); }
  } uncharge{budget, file_bytes};
  std::string data(static_cast<size_t>(st.st_size), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  auto loss = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint '", path, "': ", why,
        "; the file is corrupt or truncated, restore from another checkpoint"));
  };
  if (data.size() < kMagicLen + 8 ||
      data.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    return loss("not a cohort checkpoint (bad magic or too short)");
  }
  uint32_t count = static_cast<uint32_t>(GetLE(data.data() + kMagicLen, 4));
  uint32_t header_crc =
      static_cast<uint32_t>(GetLE(data.data() + kMagicLen + 4, 4));
  if (crc32c::Unmask(header_crc) != crc32c::Value(data.data(), kMagicLen + 4)) {
    return loss("header checksum mismatch");
  }
  size_t pos = kMagicLen + 8;
  CheckpointEntries entries;
  for (uint32_t i = 0; i < count; ++i) {
    size_t start = pos;
    if (data.size() - pos < 4)
      return loss(absl::StrCat("truncated in entry #", i));
    uint64_t name_len = GetLE(data.data() + pos, 4);
    pos += 4;
    if (data.size() - pos < name_len + 8) {
      return loss(absl::StrCat("truncated in entry #", i));
    }
    std::string name = data.substr(pos, name_len);
    pos += name_len;
    uint64_t payload_len = GetLE(data.data() + pos, 8);
    pos += 8;
    if (data.size() - pos < 4 || payload_len > data.size() - pos - 4) {
      return loss(absl::StrCat("truncated in entry #", i));
    }
    const char* payload = data.data() + pos;
    pos += payload_len;
    uint32_t crc = static_cast<uint32_t>(GetLE(data.data() + pos, 4));
    if (crc32c::Unmask(crc) !=
        crc32c::Value(data.data() + start, pos - start)) {
      return loss(absl::StrCat("checksum mismatch in entry #", i));
    }
    pos += 4;
    TensorProto proto;
    if (payload_len > static_cast<uint64_t>(INT32_MAX) ||
        !proto.ParseFromArray(payload, static_cast<int>(payload_len))) {
      return loss(absl::StrCat("entry '", name, "' does not parse"));
    }
    // cohort writes every value of a numeric tensor, so an entry declaring
    // more bytes than it carries (one value broadcast to 1 GiB) was not
    // written by a saver. Strings carry at least one byte per element, so
    // they are bounded by the entry too (their in-memory headers are
    // charged below).
    auto declared = Tensor::DeclaredBytes(proto);
    if (!declared.ok()) {
      return loss(
          absl::StrCat("entry '", name, "': ", declared.status().message()));
    }
    if (DataTypeIsPod(proto.dtype()) &&
        static_cast<uint64_t>(*declared) > payload_len) {
      return loss(absl::StrCat(
          "entry '", name, "' declares ", DataTypeName(proto.dtype()), " ",
          PartialTensorShape::FromProto(proto.tensor_shape()).DebugString(),
          " (", *declared, " bytes) but carries only ", payload_len, " bytes"));
    }
    auto t = Tensor::FromProto(
        proto, budget,
        absl::StrCat("checkpoint '", path, "': entry '", name, "'"));
    if (absl::IsResourceExhausted(t.status())) return t.status();
    if (!t.ok()) {
      return loss(absl::StrCat("entry '", name, "': ", t.status().message()));
    }
    entries.emplace_back(std::move(name), *std::move(t));
  }
  if (data.size() - pos != kFooterLen ||
      data.compare(pos, kFooterLen, kFooter, kFooterLen) != 0) {
    return loss("missing footer or trailing bytes (truncated or appended to)");
  }
  return entries;
}

absl::StatusOr<std::string> Saver::Save(const std::string& dir, int64_t step,
                                        const std::vector<std::string>& names,
                                        const std::string& basename) {
  CheckpointEntries entries;
  auto add = [&](const std::string& name, bool required) -> absl::Status {
    auto var = rm_->Lookup<Var>("", name);
    if (!var.ok()) {
      if (!required) return absl::OkStatus();
      return absl::NotFoundError(
          absl::StrCat("cannot save variable '", name, "': it does not exist"));
    }
    absl::ReaderMutexLock lock((*var)->mu());
    if (!(*var)->is_initialized()) {
      if (!required) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot save variable '", name, "': it is uninitialized"));
    }
    entries.emplace_back(name, (*var)->value());
    return absl::OkStatus();
  };
  if (names.empty()) {
    for (const auto& [container, name, type] : rm_->List()) {
      if (container == rm_->default_container() && type == Var::kTypeName) {
        COHORT_RETURN_IF_ERROR(add(name, false));
      }
    }
  } else {
    for (const auto& name : names) COHORT_RETURN_IF_ERROR(add(name, true));
  }
  std::string file = absl::StrCat(basename, "-", step);
  std::string path = absl::StrCat(dir, "/", file);
  COHORT_RETURN_IF_ERROR(WriteCheckpointFile(path, entries));
  CheckpointState state;
  state.model_checkpoint_path = file;
  COHORT_RETURN_IF_ERROR(WriteCheckpointState(dir, state));
  return path;
}

absl::Status Saver::Restore(const std::string& path,
                            const std::vector<std::string>& names) {
  COHORT_ASSIGN_OR_RETURN(CheckpointEntries entries, ReadCheckpointFile(path));
  absl::flat_hash_set<std::string> wanted(names.begin(), names.end());
  std::vector<std::pair<std::shared_ptr<Var>, Tensor>> assignments;
  absl::flat_hash_set<std::string> found;
  for (auto& entry : entries) {
    // Not a structured binding: clang 14 cannot capture those in lambdas.
    const std::string& name = entry.first;
    const Tensor& value = entry.second;
    if (!wanted.empty() && !wanted.contains(name)) continue;
    found.insert(name);
    DataType dtype = value.dtype();
    std::function<absl::StatusOr<std::shared_ptr<Var>>()> create = [&]() {
      return std::make_shared<Var>(dtype, PartialTensorShape(), name);
    };
    COHORT_ASSIGN_OR_RETURN(auto var,
                            rm_->LookupOrCreate<Var>("", name, create));
    if (var->dtype() != dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path, "' holds variable '", name,
                       "' as ", DataTypeName(dtype), " but the variable is ",
                       DataTypeName(var->dtype())));
    }
    if (!var->declared_shape().IsCompatibleWith(value.shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint '", path, "' holds variable '", name, "' with shape ",
          value.shape().DebugString(), " but the variable is declared ",
          var->declared_shape().DebugString()));
    }
    assignments.emplace_back(std::move(var), value);
  }
  for (const auto& n : names) {
    if (!found.contains(n)) {
      return absl::NotFoundError(
          absl::StrCat("variable '", n, "' is not in checkpoint '", path, "'"));
    }
  }
  for (auto& [var, value] : assignments) {
    absl::MutexLock lock(var->mu());
    var->Assign(value);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Saver::LatestCheckpoint(const std::string& dir) {
  COHORT_ASSIGN_OR_RETURN(CheckpointState state, ReadCheckpointState(dir));
  return CheckpointPath(dir, state.model_checkpoint_path);
}

bool IsCheckpointFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of("/\"\n\r") == absl::string_view::npos;
}

std::string CheckpointPath(const std::string& dir, absl::string_view name) {
  return absl::StrCat(dir, "/", name);
}

absl::StatusOr<CheckpointState> ReadCheckpointState(const std::string& dir) {
  const std::string pointer = absl::StrCat(dir, "/checkpoint");
  std::ifstream in(pointer);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint in '", dir, "' (no '", pointer, "' file)"));
  }
  auto malformed = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint pointer file '", pointer, "' is malformed: ", why,
        "; delete it to start from scratch or fix the line"));
  };
  // TF writes a few lines per kept checkpoint; this is far beyond that.
  constexpr size_t kMaxPointerBytes = 1 << 20;
  CheckpointState state;
  bool has_model_path = false;
  size_t total = 0;
  std::string line;
  while (std::getline(in, line)) {
    total += line.size() + 1;
    if (total > kMaxPointerBytes) return malformed("over 1 MiB");
    absl::string_view v = line;
    if (v.empty()) continue;
    // Each line is `field: value`. The two path fields are read; others TF
    // writes (all_model_checkpoint_timestamps, last_preserved_timestamp)
    // are skipped.
    const size_t colon = v.find(": ");
    if (colon == absl::string_view::npos) {
      return malformed(absl::StrCat("'", line, "' is not `field: value`"));
    }
    const absl::string_view field = v.substr(0, colon);
    const bool model = field == "model_checkpoint_path";
    if (!model && field != "all_model_checkpoint_paths") continue;
    v.remove_prefix(colon + 2);
    // The value: a quoted name of a file in `dir` (cohort writes no
    // other); a path elsewhere could make a saver delete or read it.
    if (!absl::ConsumePrefix(&v, "\"") || !absl::ConsumeSuffix(&v, "\"") ||
        !IsCheckpointFileName(v)) {
      return malformed(
          absl::StrCat("'", line, "' does not name a file in the directory"));
    }
    if (model) {
      state.model_checkpoint_path = std::string(v);
      has_model_path = true;
    } else {
      state.all_model_checkpoint_paths.emplace_back(v);
    }
  }
  if (!has_model_path) return malformed("no model_checkpoint_path");
  return state;
}

absl::Status WriteCheckpointState(const std::string& dir,
                                  const CheckpointState& state) {
  std::string text = absl::StrCat("model_checkpoint_path: \"",
                                  state.model_checkpoint_path, "\"\n");
  for (const auto& p : state.all_model_checkpoint_paths) {
    absl::StrAppend(&text, "all_model_checkpoint_paths: \"", p, "\"\n");
  }
  return WriteFileAtomically(absl::StrCat(dir, "/checkpoint"), text);
}

}  // namespace cohort
