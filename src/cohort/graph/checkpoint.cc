#include "cohort/graph/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents) {
  std::random_device rd;
  std::string tmp = absl::StrCat(path, ".tmp-", getpid(), "-", rd());
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
  return WriteFileAtomically(path, out);
}

absl::StatusOr<CheckpointEntries> ReadCheckpointFile(const std::string& path) {
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
    if (!proto.ParseFromArray(payload, static_cast<int>(payload_len))) {
      return loss(absl::StrCat("entry '", name, "' does not parse"));
    }
    auto t = Tensor::FromProto(proto);
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
