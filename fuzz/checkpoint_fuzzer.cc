// Fuzzes the checkpoint reader (src/cohort/graph/checkpoint.h): the bytes of
// a checkpoint file, read back by ReadCheckpointFile and restored by Saver.
//
// Input: byte 0 holds flags, the rest is the file.
//   bit 0  recompute the header's and every entry's masked CRC32C before
//          writing the file, so the fuzzer gets past the checksums to the
//          entry layout, the TensorProto parser and Tensor::FromProto;
//   bit 1  restore the file into a fresh ResourceMgr with Saver::Restore;
//   bit 2  write what was read with WriteCheckpointFile and read it back
//          (slow: the writer fsyncs).
// The file lives at one reused path in a private directory under /dev/shm
// (or /tmp; the reader has no in-memory entry point).
//
// Checked: no crash, no out-of-bounds access, no absurd allocation
// (libFuzzer's malloc limit); any failure is DataLoss naming the file; a
// file that reads restores (unless one name holds two dtypes) and
// round-trips.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/checkpoint.h"
#include "cohort/graph/crc32c.h"
#include "cohort/graph/resource_mgr.h"
#include "google/protobuf/stubs/logging.h"
#include "tensor_known_bugs.h"

namespace {

std::string& Dir() {
  static std::string* const dir = new std::string;
  return *dir;
}

void RemoveDir() {
  for (const char* name : {"/ckpt", "/again"}) {
    unlink(absl::StrCat(Dir(), name).c_str());
  }
  rmdir(Dir().c_str());
}

void WriteFile(const std::string& path, const std::string& contents) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  COHORT_CHECK(fd >= 0) << "cannot create " << path;
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    COHORT_CHECK(n > 0) << "cannot write " << path;
    done += static_cast<size_t>(n);
  }
  close(fd);
}

uint64_t GetLE(const std::string& s, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) {
    v |= uint64_t{static_cast<uint8_t>(s[pos + i])} << (8 * i);
  }
  return v;
}

void PutMaskedCrc(std::string* s, size_t pos, size_t start) {
  const uint32_t crc = cohort::crc32c::Mask(
      cohort::crc32c::Value(s->data() + start, pos - start));
  for (int i = 0; i < 4; ++i) (*s)[pos + i] = static_cast<char>(crc >> (8 * i));
}

// Walks the entries the way the reader does, calling
// visit(start, payload, payload_len, crc_pos) for each entry whose bytes
// are all there; stops where the reader would.
template <typename Visit>
void ForEachEntry(const std::string& s, Visit visit) {
  constexpr size_t kHeader = 12;  // magic
  if (s.size() < kHeader + 8) return;
  const uint64_t count = GetLE(s, kHeader, 4);
  size_t pos = kHeader + 8;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t start = pos;
    if (s.size() - pos < 4) return;
    const uint64_t name_len = GetLE(s, pos, 4);
    pos += 4;
    if (s.size() - pos < name_len + 8) return;
    pos += name_len;
    const uint64_t payload_len = GetLE(s, pos, 8);
    pos += 8;
    if (s.size() - pos < 4 || payload_len > s.size() - pos - 4) return;
    visit(start, pos, payload_len, pos + payload_len);
    pos += payload_len + 4;
  }
}

// Stores the right CRC wherever the reader will check one.
void FixChecksums(std::string* s) {
  if (s->size() < 20) return;
  PutMaskedCrc(s, 16, 0);
  ForEachEntry(*s, [s](size_t start, size_t, uint64_t, size_t crc_pos) {
    PutMaskedCrc(s, crc_pos, start);
  });
}

// Known project bug (fuzz/crashes-found/checkpoint/README.md): an entry
// whose TensorProto declares a huge shape overflows the tensor's buffer or
// allocates gigabytes. Such files are skipped unless COHORT_FUZZ_KNOWN_BUGS
// is set.
bool DeclaresTooMuch(const std::string& file) {
  bool too_much = false;
  ForEachEntry(file, [&](size_t, size_t payload, uint64_t payload_len, size_t) {
    cohort::TensorProto proto;
    if (proto.ParseFromArray(file.data() + payload,
                             static_cast<int>(payload_len)) &&
        cohort::fuzz::TensorDeclaresTooMuch(proto)) {
      too_much = true;
    }
  });
  return too_much;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // tmpfs when there is one: the writer under test fsyncs.
  char shm_pattern[] = "/dev/shm/fuzz_checkpoint.XXXXXX";
  char tmp_pattern[] = "/tmp/fuzz_checkpoint.XXXXXX";
  const char* dir = mkdtemp(shm_pattern);
  if (dir == nullptr) dir = mkdtemp(tmp_pattern);
  COHORT_CHECK(dir != nullptr) << "mkdtemp failed";
  Dir() = dir;
  atexit(RemoveDir);
  // Keeps stderr for libFuzzer's own output (protobuf logs every string
  // field that is not UTF-8).
  cohort::SetMinLogLevel(cohort::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (flags & 1) FixChecksums(&file);
  if (cohort::fuzz::SkipKnownBugs() && DeclaresTooMuch(file)) return 0;
  const std::string path = absl::StrCat(Dir(), "/ckpt");
  WriteFile(path, file);

  auto entries = cohort::ReadCheckpointFile(path);
  if (!entries.ok()) {
    COHORT_CHECK(entries.status().code() == absl::StatusCode::kDataLoss)
        << entries.status();
    COHORT_CHECK(absl::StrContains(entries.status().message(), path))
        << entries.status();
    return 0;
  }
  for (const auto& [name, tensor] : *entries) {
    COHORT_CHECK(tensor.IsInitialized()) << name;
  }

  if (flags & 2) {
    cohort::ResourceMgr rm;
    cohort::Saver saver(&rm);
    absl::Status restored = saver.Restore(path);
    if (!restored.ok()) {
      // Only one name saved with two dtypes conflicts in a fresh manager.
      COHORT_CHECK(restored.code() == absl::StatusCode::kInvalidArgument)
          << restored;
      bool conflict = false;
      for (size_t i = 0; i < entries->size() && !conflict; ++i) {
        for (size_t j = 0; j < i; ++j) {
          if ((*entries)[i].first == (*entries)[j].first &&
              (*entries)[i].second.dtype() != (*entries)[j].second.dtype()) {
            conflict = true;
          }
        }
      }
      COHORT_CHECK(conflict) << restored;
    }
  }

  if (flags & 4) {
    const std::string again_path = absl::StrCat(Dir(), "/again");
    absl::Status written = cohort::WriteCheckpointFile(again_path, *entries);
    COHORT_CHECK(written.ok()) << written;
    auto again = cohort::ReadCheckpointFile(again_path);
    COHORT_CHECK(again.ok()) << again.status();
    COHORT_CHECK(again->size() == entries->size());
    for (size_t i = 0; i < entries->size(); ++i) {
      COHORT_CHECK((*again)[i].first == (*entries)[i].first);
      COHORT_CHECK((*again)[i].second.Equals((*entries)[i].second))
          << "entry '" << (*entries)[i].first << "' changed on a round trip";
    }
  }
  return 0;
}
