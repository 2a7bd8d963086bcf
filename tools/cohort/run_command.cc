// `cohort run`: a client from the shell for a cluster's master
// (runtime/grpc_session.h).
//
//   cohort run --target grpc://HOST:PORT --graph FILE(.pbtxt|.pb)
//       [--feed NAME=JSON]... [--fetch NAME[:INDEX]]... [--run NODE]...
//       [--steps N] [--timeout SEC] [--format text|json]
//       [--token-file F] [--tls-ca F ...]
//   cohort run --target grpc://HOST:PORT --reset [CONTAINER...]
//
// Creates a session with the graph, runs N steps (default 1) with the
// feeds, fetches and target nodes, prints the fetches of the last step and
// closes the session. A feed's JSON is a number or a nested list (the shape
// from the nesting, the dtype from the placeholder's). `--format json`
// prints one object: fetch (as given) -> {"dtype", "shape", "values"} with
// values flat in row-major order. `--reset` calls the master's Reset
// (closes its sessions, clears the containers, all when none is given).
// Failures print the master's message (it names the node, device or task)
// and exit 1; bad flags exit 2. A feed nested deeper than kMaxFeedDepth
// lists, and a --graph that is not a regular file or is over
// kMaxRunGraphBytes (the master's gRPC message cap), are refused before
// anything is parsed.
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/graph/graph_io.h"
#include "cohort/graph/tensor.h"
#include "cohort/runtime/grpc_session.h"
#include "tools/cohort/commands.h"
#include "tools/cohort/coord_client_flags.h"
#include "tools/cohort/flag_checks.h"

namespace cohort::tools {
namespace {

// A tensor of rank 64 is far beyond any model; the parser and the walks
// below recurse per level, so 60,000 levels overflowed the stack.
constexpr int kMaxFeedDepth = 64;
// The master refuses a CreateSession larger than its gRPC message cap
// (docs/security.md), so a larger file cannot be run anyway.
constexpr int64_t kMaxRunGraphBytes = int64_t{64} << 20;

// InvalidArgument when `text`'s lists or objects nest deeper than
// kMaxFeedDepth; a linear scan that allocates nothing, run before parsing.
absl::Status CheckFeedNesting(absl::string_view text, const std::string& feed) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxFeedDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("--feed ", feed, ": the value nests more than ",
                         kMaxFeedDepth, " lists deep (at character ", i + 1,
                         "); a feed is a number or a nested list of rank <= ",
                         kMaxFeedDepth));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

struct RunFlags {
  std::string target;
  std::string graph;
  std::vector<std::string> feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> run;
  int steps = 1;
  double timeout_seconds = 0;
  std::string format = "text";
  bool reset = false;
  std::vector<std::string> containers;
  // The task that forms collective groups for the graph's collective ops
  // (ConfigProto.experimental.collective_group_leader); "" for none.
  std::string collective_group_leader;
  CoordSecurityFlags security;
};

// Names dtypes as NumPy does in JSON output ("float32", not "float").
std::string JsonDtypeName(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT:
      return "float32";
    case DT_DOUBLE:
      return "float64";
    default:
      return DataTypeName(dtype);
  }
}

// The shape of a nested JSON list (a number is a scalar); InvalidArgument
// for ragged lists or non-numbers.
absl::Status ShapeOf(const Json& value, const std::string& feed,
                     std::vector<int64_t>* dims, size_t depth = 0) {
  if (!value.is_array()) {
    if (!value.is_number() && !value.is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--feed ", feed, ": expected a number or a nested list, found ",
          JsonTypeName(value)));
    }
    if (depth != dims->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--feed ", feed, ": the nested lists are ragged"));
    }
    return absl::OkStatus();
  }
  const int64_t n = value.size();
  if (depth == dims->size()) {
    dims->push_back(n);
  } else if ((*dims)[depth] != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--feed ", feed, ": the nested lists are ragged"));
  }
  if (n == 0 && depth + 1 < dims->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--feed ", feed, ": the nested lists are ragged"));
  }
  for (const Json& item : value) {
    COHORT_RETURN_IF_ERROR(ShapeOf(item, feed, dims, depth + 1));
  }
  return absl::OkStatus();
}

void Flatten(const Json& value, std::vector<const Json*>* out) {
  if (!value.is_array()) {
    out->push_back(&value);
    return;
  }
  for (const Json& item : value) Flatten(item, out);
}

// Checks every value against the placeholder's dtype before converting:
// a bool must be true/false, an integer dtype takes integers within range,
// a float dtype any number.
template <typename T>
absl::Status Fill(const std::vector<const Json*>& values,
                  const std::string& feed, Tensor* t) {
  T* data = t->data<T>();
  for (size_t i = 0; i < values.size(); ++i) {
    const Json& v = *values[i];
    bool fits;
    if constexpr (std::is_same_v<T, bool>) {
      fits = v.is_boolean();
    } else if constexpr (std::is_integral_v<T>) {
      fits = v.is_number_integer() &&
             (v.is_number_unsigned()
                  ? v.get<uint64_t>() <=
                        static_cast<uint64_t>(std::numeric_limits<T>::max())
                  : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                        v.get<int64_t>() <= std::numeric_limits<T>::max());
    } else {
      fits = v.is_number();
    }
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--feed ", feed, ": value ", v.dump(), " (element ", i,
          ") does not fit the placeholder's dtype ", DataTypeName(t->dtype())));
    }
    data[i] = v.get<T>();
  }
  return absl::OkStatus();
}

// NAME=JSON -> (NAME, tensor of the placeholder's dtype).
absl::StatusOr<std::pair<std::string, Tensor>> ParseFeed(
    const std::string& flag, const GraphDef& graph) {
  const size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--feed ", flag, ": expected NAME=JSON"));
  }
  const std::string name = flag.substr(0, eq);
  absl::StatusOr<DataType> placeholder = FeedDataType(graph, name);
  if (!placeholder.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", placeholder.status().message()));
  }
  const DataType dtype = *placeholder;
  COHORT_RETURN_IF_ERROR(CheckFeedNesting(flag.substr(eq + 1), name));
  COHORT_ASSIGN_OR_RETURN(Json json,
                          ParseJson(flag.substr(eq + 1), "--feed " + name));
  std::vector<int64_t> dims;
  COHORT_RETURN_IF_ERROR(ShapeOf(json, name, &dims));
  std::vector<const Json*> values;
  Flatten(json, &values);
  Tensor t(dtype, TensorShape(absl::MakeConstSpan(dims)));
  absl::Status filled;
  switch (dtype) {
    case DT_FLOAT:
      filled = Fill<float>(values, name, &t);
      break;
    case DT_DOUBLE:
      filled = Fill<double>(values, name, &t);
      break;
    case DT_INT32:
      filled = Fill<int32_t>(values, name, &t);
      break;
    case DT_INT64:
      filled = Fill<int64_t>(values, name, &t);
      break;
    case DT_BOOL:
      filled = Fill<bool>(values, name, &t);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("--feed ", name, ": placeholders of dtype ",
                       DataTypeName(dtype), " cannot be fed from JSON"));
  }
  COHORT_RETURN_IF_ERROR(filled);
  return std::make_pair(name, std::move(t));
}

template <typename T>
void AppendValues(const Tensor& t, Json* values) {
  for (const T& v : t.span<T>()) values->push_back(v);
}

Json TensorToJson(const Tensor& t) {
  Json out = Json::object();
  out["dtype"] = JsonDtypeName(t.dtype());
  Json shape = Json::array();
  for (int64_t d : t.shape().dim_sizes()) shape.push_back(d);
  out["shape"] = shape;
  Json values = Json::array();
  switch (t.dtype()) {
    case DT_FLOAT:
      AppendValues<float>(t, &values);
      break;
    case DT_DOUBLE:
      AppendValues<double>(t, &values);
      break;
    case DT_INT32:
      AppendValues<int32_t>(t, &values);
      break;
    case DT_INT64:
      AppendValues<int64_t>(t, &values);
      break;
    case DT_BOOL:
      AppendValues<bool>(t, &values);
      break;
    case DT_STRING:
      AppendValues<std::string>(t, &values);
      break;
    default:
      break;
  }
  out["values"] = values;
  return out;
}

absl::Status Run(const RunFlags& f) {
  runtime::GrpcSessionOptions options;
  COHORT_ASSIGN_OR_RETURN(options.security, f.security.Security());
  if (f.timeout_seconds > 0) {
    options.config.set_operation_timeout_in_ms(
        static_cast<int64_t>(f.timeout_seconds * 1000));
    options.rpc_timeout = absl::Seconds(f.timeout_seconds) + absl::Seconds(5);
  }
  if (f.reset) {
    return runtime::GrpcSession::ResetTarget(f.target, f.containers, options);
  }
  options.config.mutable_experimental()->set_collective_group_leader(
      f.collective_group_leader);
  COHORT_ASSIGN_OR_RETURN(GraphDef graph,
                          ReadGraphDef(f.graph, kMaxRunGraphBytes));
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (const std::string& flag : f.feeds) {
    COHORT_ASSIGN_OR_RETURN(auto feed, ParseFeed(flag, graph));
    feeds.push_back(std::move(feed));
  }
  COHORT_ASSIGN_OR_RETURN(
      auto session, runtime::GrpcSession::Create(f.target, graph, options));
  std::vector<Tensor> outputs;
  for (int step = 0; step < f.steps; ++step) {
    absl::Status s = session->Run(feeds, f.fetches, f.run, &outputs);
    if (!s.ok()) {
      (void)session->Close();
      return s;
    }
  }
  COHORT_RETURN_IF_ERROR(session->Close());
  if (f.format == "json") {
    // nlohmann's ordered insertion is not guaranteed; print by hand so the
    // keys come in the order the fetches were given.
    std::vector<std::string> parts;
    for (size_t i = 0; i < outputs.size(); ++i) {
      parts.push_back(absl::StrCat(Json(f.fetches[i]).dump(), ": ",
                                   TensorToJson(outputs[i]).dump()));
    }
    std::cout << "{" << absl::StrJoin(parts, ", ") << "}" << std::endl;
  } else {
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::cout << f.fetches[i] << ": " << outputs[i].DebugString()
                << std::endl;
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterRunCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* command = app.add_subcommand(
      "run", "run a graph on a cluster through a task's master");
  command->add_option("--target", flags->target, "grpc://HOST:PORT")
      ->required();
  command->add_option("--graph", flags->graph, "GraphDef file (.pbtxt, .pb)");
  command->add_option("--feed", flags->feeds,
                      "NAME=JSON: a number or nested list for a placeholder");
  command->add_option("--fetch", flags->fetches, "NAME[:INDEX] to print");
  command->add_option("--run", flags->run, "node to run for its effect");
  command->add_option("--steps", flags->steps, "steps to run (1)")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--timeout", flags->timeout_seconds,
                   "seconds for session creation and each step (0: none)")
      ->check(Seconds(/*allow_zero=*/true));
  command->add_option("--format", flags->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  command->add_option(
      "--collective-group-leader", flags->collective_group_leader,
      "TASK (/job:worker/replica:0/task:0) that forms the groups of the "
      "graph's collective ops");
  command->add_flag("--reset", flags->reset,
                    "Reset the master: close its sessions and clear the "
                    "containers given as arguments (all when none)");
  command->add_option("containers", flags->containers,
                      "with --reset: containers to clear");
  flags->security.Add(command, /*server=*/false);
  command->callback([flags, &exit_code] {
    if (!flags->reset && flags->graph.empty()) {
      std::cerr << "cohort run: --graph is required (or --reset)\n";
      exit_code = 2;
      return;
    }
    absl::Status status = Run(*flags);
    if (!status.ok()) {
      std::cerr << "cohort run: " << status.message() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace cohort::tools
