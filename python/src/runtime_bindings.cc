// cohort.Server and cohort.Session: TensorFlow's tf.distribute.Server and
// tf.compat.v1.Session over cohort's runtime, with NumPy arrays in and out.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/config.pb.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/graph/graph_io.h"
#include "cohort/graph/local_session.h"
#include "cohort/graph/tensor.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/grpc_session.h"
#include "cohort/runtime/server.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "python/src/bindings.h"
#include "python/src/json_convert.h"
#include "python/src/status.h"

namespace py = pybind11;

namespace cohort::python {
namespace {

std::string TypeName(py::handle value) {
  return py::str(py::type::of(value).attr("__name__")).cast<std::string>();
}

std::string JobToken(const std::optional<std::string>& token) {
  if (token.has_value()) return *token;
  return Env::Default()->GetVar(rpc::kJobTokenEnvVar).value_or("");
}

// ---- NumPy <-> Tensor ------------------------------------------------------

py::dtype NumpyDtype(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT:
      return py::dtype::of<float>();
    case DT_DOUBLE:
      return py::dtype::of<double>();
    case DT_INT32:
      return py::dtype::of<int32_t>();
    case DT_INT64:
      return py::dtype::of<int64_t>();
    case DT_BOOL:
      return py::dtype::of<bool>();
    default:
      return py::dtype("O");
  }
}

// The tensor's buffer as an array that keeps the tensor alive: no copy when
// the array is the buffer's only user; a copy when the session still holds
// it (a Const's value, a variable read in this process), so that writing to
// the array cannot change the session's state.
py::object ToNumpy(Tensor t) {
  std::vector<py::ssize_t> shape;
  for (int i = 0; i < t.dims(); ++i) shape.push_back(t.dim_size(i));
  if (t.dtype() == DT_STRING) {
    py::array out(py::dtype("O"), shape);
    py::object* items = static_cast<py::object*>(out.mutable_data());
    const std::string* values = t.data<std::string>();
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      items[i] = py::bytes(values[i]);
    }
    return std::move(out);
  }
  if (DataTypeSize(t.dtype()) == 0) {
    ThrowStatus(absl::UnimplementedError(
        absl::StrCat("a fetched tensor of dtype ", DataTypeName(t.dtype()),
                     " has no NumPy form; fetch a numeric or string tensor")));
  }
  auto* owner = new Tensor(t.RefCountIsOne() ? std::move(t) : t.DeepCopy());
  py::capsule keep(owner, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(NumpyDtype(owner->dtype()), shape, owner->raw_data(), keep);
}

// By kind and size, not by descriptor identity: an unpickled float32 or
// np.longlong has its own descriptor. The byte order is the caller's.
DataType FromNumpyDtype(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const py::ssize_t size = dtype.itemsize();
  if (kind == 'f' && size == 4) return DT_FLOAT;
  if (kind == 'f' && size == 8) return DT_DOUBLE;
  if (kind == 'i' && size == 4) return DT_INT32;
  if (kind == 'i' && size == 8) return DT_INT64;
  if (kind == 'b' && size == 1) return DT_BOOL;
  if (kind == 'U' || kind == 'S' || kind == 'O') return DT_STRING;
  return DT_INVALID;
}

// A feed as a tensor. Lists and scalars take the placeholder's dtype (when
// known); arrays keep theirs, and the session names a mismatch.
Tensor ToTensor(const std::string& name, py::handle value,
                DataType placeholder) {
  if (value.is_none()) {
    // np.asarray(None, float32) is NaN, and as bool False: never a feed.
    throw py::type_error("feed " + name + ": None is not a value to feed");
  }
  py::module_ np = py::module_::import("numpy");
  py::array array;
  if (py::isinstance<py::array>(value) || placeholder == DT_INVALID ||
      placeholder == DT_STRING) {
    array = np.attr("asarray")(value);
  } else {
    array = np.attr("asarray")(value, NumpyDtype(placeholder));
  }
  const DataType dtype = FromNumpyDtype(array.dtype());
  if (dtype == DT_INVALID) {
    ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
        "feed ", name, ": NumPy dtype ",
        py::str(array.dtype()).cast<std::string>(),
        " has no cohort dtype (float32, float64, int32, int64, bool, str)")));
  }
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  Tensor t(dtype, TensorShape(absl::MakeConstSpan(dims)));
  if (dtype == DT_STRING) {
    std::string* out = t.data<std::string>();
    int64_t i = 0;
    for (py::handle item : np.attr("ravel")(array)) {
      if (py::isinstance<py::bytes>(item) || py::isinstance<py::str>(item)) {
        out[i++] = item.cast<std::string>();
      } else {
        ThrowStatus(absl::InvalidArgumentError(
            absl::StrCat("feed ", name, ": element ", i, " is a ",
                         TypeName(item), ", not str or bytes")));
      }
    }
    return t;
  }
  // One copy, into the tensor's own aligned buffer (C order, native byte
  // order: '>f4' is converted).
  py::object native = array.dtype().attr("newbyteorder")("=");
  py::array contiguous = np.attr("ascontiguousarray")(array, native);
  std::memcpy(t.raw_data(), contiguous.data(), t.TotalBytes());
  return t;
}

// ---- Server ----------------------------------------------------------------

std::shared_ptr<runtime::Server> MakeServer(
    py::handle cluster, std::optional<std::string> job_name,
    std::optional<int> task_index, std::optional<std::string> protocol,
    bool start, std::optional<std::string> token, bool insecure,
    bool coordination, int num_threads) {
  ClusterSpec spec = SpecFromPython(cluster);
  ServerDef def = ValueOrThrow(
      MakeServerDef(spec, std::move(job_name), task_index, protocol));
  runtime::ServerOptions options;
  options.security.job_token = JobToken(token);
  options.security.insecure = insecure;
  options.num_threads = num_threads;
  if (options.security.job_token.empty() && !insecure) {
    ThrowStatus(absl::FailedPreconditionError(
        "Server: no job token: pass token=... or set COHORT_JOB_TOKEN "
        "(every task and client of the cluster uses the same one), or pass "
        "insecure=True to serve without authentication"));
  }
  if (coordination) {
    // As `cohort server`: under `cohort launch` the task joins the
    // launcher's coordination service, else the cluster runs its own.
    options.launcher_coordination_address =
        Env::Default()->GetVar(coord::kEnvCoordinationAddress).value_or("");
    def.mutable_default_session_config()
        ->mutable_experimental()
        ->mutable_coordination_config()
        ->set_service_type("standalone");
  }
  std::shared_ptr<runtime::Server> server =
      ValueOrThrow(runtime::Server::Create(def, options));
  if (start) CallWithoutGil([&] { return server->Start(); });
  return server;
}

// ---- Session ---------------------------------------------------------------

GraphDef LoadGraph(py::handle graph) {
  if (graph.is_none()) return GraphDef();
  if (py::isinstance<py::bytes>(graph)) {
    GraphDef def;
    if (!def.ParseFromString(graph.cast<std::string>())) {
      ThrowStatus(absl::InvalidArgumentError(
          "graph: the bytes are not a serialized GraphDef"));
    }
    return def;
  }
  if (py::isinstance<py::str>(graph) || py::hasattr(graph, "__fspath__")) {
    std::string path =
        py::module_::import("os").attr("fspath")(graph).cast<std::string>();
    return ValueOrThrow(ReadGraphDef(path));
  }
  throw py::type_error("graph: expected a path (.pb/.pbtxt) or bytes, got " +
                       TypeName(graph));
}

// A step deadline from Python: None is none (zero, as in RunOptions);
// zero, negative and NaN are errors, not "no deadline".
absl::Duration StepTimeout(std::optional<double> seconds) {
  if (!seconds.has_value()) return absl::ZeroDuration();
  if (!(*seconds > 0)) {
    ThrowStatus(absl::InvalidArgumentError(
        absl::StrCat("timeout: expected a number of seconds > 0 (None: no "
                     "deadline), got ",
                     *seconds)));
  }
  return absl::Seconds(*seconds);
}

// ---- Session config --------------------------------------------------------
//
// config= is the JSON form of ConfigProto (proto/cohort/config.proto) as a
// dict. Every key and value is checked against the message's descriptor
// before protobuf's JSON parser converts it: the parser alone would take
// "x" for ["x"] and "4" for 4, and would name a bad key without its path.
// Errors are InvalidArgumentError (a ValueError) naming the key's full path.

namespace pb = ::google::protobuf;

[[noreturn]] void ConfigError(const std::string& path,
                              const std::string& what) {
  ThrowStatus(absl::InvalidArgumentError(
      absl::StrCat("config: \"", path, "\" ", what,
                   " (cohort.ConfigProto, proto/cohort/config.proto)")));
}

std::string Repr(py::handle value) {
  return py::repr(value).cast<std::string>();
}

// The field `key` names: its proto name or its JSON (lowerCamelCase) name,
// as protobuf's JSON parser accepts both.
const pb::FieldDescriptor* FindConfigField(const pb::Descriptor* type,
                                           const std::string& key) {
  if (const pb::FieldDescriptor* f = type->FindFieldByName(key)) return f;
  for (int i = 0; i < type->field_count(); ++i) {
    if (type->field(i)->json_name() == key) return type->field(i);
  }
  return nullptr;
}

void CheckConfigMessage(py::handle value, const pb::Descriptor* type,
                        const std::string& path);

// One value of `field` (one element, when the field is repeated).
void CheckConfigScalar(py::handle value, const pb::FieldDescriptor* field,
                       const std::string& path) {
  const bool is_bool = py::isinstance<py::bool_>(value);
  const bool is_int = py::isinstance<py::int_>(value) && !is_bool;
  auto expected = [&](const std::string& type) {
    ConfigError(path, absl::StrCat("must be ", type, ", got ", TypeName(value),
                                   " ", Repr(value)));
  };
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return CheckConfigMessage(value, field->message_type(), path);
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      if (!is_bool) expected("a bool");
      return;
    case pb::FieldDescriptor::CPPTYPE_STRING:
      // A bytes field's JSON form is base64 text, so a str as well.
      if (!py::isinstance<py::str>(value)) expected("a str");
      return;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      if (!is_int && !py::isinstance<py::float_>(value)) expected("a number");
      return;
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      if (py::isinstance<py::str>(value)) {
        if (field->enum_type()->FindValueByName(value.cast<std::string>()) ==
            nullptr) {
          std::vector<std::string> names;
          for (int i = 0; i < field->enum_type()->value_count(); ++i) {
            names.push_back(field->enum_type()->value(i)->name());
          }
          ConfigError(path, absl::StrCat("has no value ", Repr(value),
                                         "; its values are ",
                                         absl::StrJoin(names, ", ")));
        }
        return;
      }
      if (!is_int) expected("an enum value's name (str) or number");
      return;
    default:
      break;
  }
  // The integer types, with their ranges: 2**40 for an int32 is refused
  // here, not wrapped.
  const char* type_name = pb::FieldDescriptor::CppTypeName(field->cpp_type());
  if (!is_int) expected(absl::StrCat("an int (", type_name, ")"));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  bool fits = overflow == 0;
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      fits = fits && v >= std::numeric_limits<int32_t>::min() &&
             v <= std::numeric_limits<int32_t>::max();
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      fits = fits && v >= 0 && v <= std::numeric_limits<uint32_t>::max();
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      // ToJson carries 64-bit signed integers: a uint64 above 2**63 - 1 is
      // refused here (ConfigProto has no uint64 field).
      fits = fits && v >= 0;
      break;
    default:  // CPPTYPE_INT64
      break;
  }
  if (!fits) {
    ConfigError(path, absl::StrCat("is out of range for ", type_name, ": ",
                                   Repr(value)));
  }
}

void CheckConfigMessage(py::handle value, const pb::Descriptor* type,
                        const std::string& path) {
  const std::string where = path.empty() ? std::string("config") : path;
  if (!py::isinstance<py::dict>(value)) {
    if (path.empty()) {
      throw py::type_error(
          "config: expected a dict (the JSON form of cohort.ConfigProto, "
          "e.g. {\"experimental\": {\"collective_group_leader\": "
          "\"/job:chief/replica:0/task:0\"}}) or None, got " +
          TypeName(value));
    }
    ConfigError(path,
                absl::StrCat("must be a dict (", type->full_name(), "), got ",
                             TypeName(value), " ", Repr(value)));
  }
  std::vector<const pb::FieldDescriptor*> seen;
  for (auto [k, v] : value.cast<py::dict>()) {
    if (!py::isinstance<py::str>(k)) {
      ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
          where, ": the key ", Repr(k), " is not a str (its type is ",
          TypeName(k), "; cohort.ConfigProto, proto/cohort/config.proto)")));
    }
    const std::string key = k.cast<std::string>();
    const std::string key_path = path.empty() ? key : path + "." + key;
    const pb::FieldDescriptor* field = FindConfigField(type, key);
    if (field == nullptr) {
      std::vector<std::string> names;
      for (int i = 0; i < type->field_count(); ++i) {
        names.push_back(type->field(i)->name());
      }
      ConfigError(key_path,
                  absl::StrCat("is not a key of ", type->full_name(),
                               "; its keys are ", absl::StrJoin(names, ", ")));
    }
    for (const pb::FieldDescriptor* other : seen) {
      if (other == field) {
        ConfigError(key_path,
                    absl::StrCat("names ", field->name(),
                                 ", which another key of this dict names "
                                 "too (by its proto or its JSON name)"));
      }
    }
    seen.push_back(field);
    // None is the field's default, as JSON's null.
    if (v.is_none()) continue;
    if (field->is_map()) {
      if (!py::isinstance<py::dict>(v)) {
        ConfigError(key_path, absl::StrCat("must be a dict, got ", TypeName(v),
                                           " ", Repr(v)));
      }
      const pb::FieldDescriptor* mapped = field->message_type()->map_value();
      for (auto [mk, mv] : v.cast<py::dict>()) {
        CheckConfigScalar(mv, mapped,
                          absl::StrCat(key_path, "[", Repr(mk), "]"));
      }
    } else if (field->is_repeated()) {
      if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) {
        ConfigError(key_path, absl::StrCat("must be a list, got ", TypeName(v),
                                           " ", Repr(v)));
      }
      int i = 0;
      for (py::handle item : v) {
        CheckConfigScalar(item, field, absl::StrCat(key_path, "[", i++, "]"));
      }
    } else {
      CheckConfigScalar(v, field, key_path);
    }
  }
}

ConfigProto ConfigFromPython(py::handle config) {
  ConfigProto proto;
  if (config.is_none()) return proto;
  CheckConfigMessage(config, ConfigProto::descriptor(), "");
  const std::string json = ToJson(config, "config").dump();
  const auto status = pb::util::JsonStringToMessage(json, &proto);
  if (!status.ok()) {
    // Checked above; what is left is the parser's own (its message names
    // the field).
    ThrowStatus(absl::InvalidArgumentError(
        absl::StrCat("config: ", std::string(status.message()),
                     " (cohort.ConfigProto, proto/cohort/config.proto)")));
  }
  return proto;
}

// The parts of a ConfigProto a session in this process (target "") has:
// its thread pool and its default step deadline. Every other field is the
// distributed runtime's (device_filters, the collective group leader, ...)
// and is refused by name rather than ignored.
SessionOptions LocalSessionOptions(const ConfigProto& config) {
  std::vector<const pb::FieldDescriptor*> set;
  config.GetReflection()->ListFields(config, &set);
  for (const pb::FieldDescriptor* field : set) {
    if (field->number() == ConfigProto::kIntraOpParallelismThreadsFieldNumber ||
        field->number() == ConfigProto::kOperationTimeoutInMsFieldNumber) {
      continue;
    }
    // {"experimental": {}} sets nothing.
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE &&
        !field->is_repeated() &&
        config.GetReflection()->GetMessage(config, field).ByteSizeLong() == 0) {
      continue;
    }
    ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
        "config: \"", field->name(),
        "\" applies to a session on a cluster's master (target "
        "grpc://host:port); target \"\" runs the graph in this process, "
        "where only intra_op_parallelism_threads and operation_timeout_in_ms "
        "apply")));
  }
  SessionOptions options;
  options.num_threads = config.intra_op_parallelism_threads();
  if (config.operation_timeout_in_ms() > 0) {
    options.default_timeout =
        absl::Milliseconds(config.operation_timeout_in_ms());
  }
  return options;
}

class PySession {
 public:
  PySession(const std::string& target, py::handle graph,
            std::optional<std::string> token, std::optional<double> timeout,
            py::handle config) {
    graph_ = LoadGraph(graph);
    default_timeout_ = StepTimeout(timeout);
    runtime::GrpcSessionOptions options;
    options.security.job_token = JobToken(token);
    options.config = ConfigFromPython(config);
    SessionOptions local;
    if (target.empty()) local = LocalSessionOptions(options.config);
    // Interruptible: a master that is not up yet is waited for (up to the
    // RPC timeout). The call owns copies of what it reads.
    session_ = CallInterruptible<std::shared_ptr<Session>>(
        [target, graph = graph_, options,
         local]() -> absl::StatusOr<std::shared_ptr<Session>> {
          absl::StatusOr<std::unique_ptr<Session>> session;
          if (target.empty()) {
            session = LocalSession::Create(graph, local);
          } else {
            session = runtime::GrpcSession::Create(target, graph, options);
          }
          if (!session.ok()) return session.status();
          return std::shared_ptr<Session>(*std::move(session));
        });
  }

  // Closing a session may wait for its master: not with the GIL held.
  ~PySession() {
    if (session_ == nullptr) return;
    py::gil_scoped_release release;
    session_.reset();
  }

  py::object Run(py::handle fetches, py::handle feed_dict,
                 std::optional<double> timeout) {
    const bool single = py::isinstance<py::str>(fetches);
    std::vector<std::string> names;
    if (single) {
      names.push_back(fetches.cast<std::string>());
    } else {
      for (py::handle f : fetches) {
        if (!py::isinstance<py::str>(f)) {
          throw py::type_error("fetches: expected str names, got " +
                               TypeName(f));
        }
        names.push_back(f.cast<std::string>());
      }
    }
    // "name:0" is a tensor to fetch; "name" an op to run (result None).
    std::vector<std::string> tensor_fetches;
    std::vector<std::string> targets;
    for (const std::string& n : names) {
      (n.find(':') == std::string::npos ? targets : tensor_fetches)
          .push_back(n);
    }
    std::vector<std::pair<std::string, Tensor>> feeds;
    if (!feed_dict.is_none()) {
      for (auto [k, v] : feed_dict.cast<py::dict>()) {
        const std::string name = py::str(k).cast<std::string>();
        absl::StatusOr<DataType> placeholder = FeedDataType(graph_, name);
        feeds.emplace_back(
            name,
            ToTensor(name, v, placeholder.ok() ? *placeholder : DT_INVALID));
      }
    }
    RunOptions options;
    options.timeout =
        timeout.has_value() ? StepTimeout(timeout) : default_timeout_;
    std::shared_ptr<Session> session = Current();
    auto outputs = CallInterruptible<std::vector<Tensor>>(
        [session, options, feeds = std::move(feeds), tensor_fetches,
         targets]() -> absl::StatusOr<std::vector<Tensor>> {
          std::vector<Tensor> out;
          absl::Status s =
              session->Run(options, feeds, tensor_fetches, targets, &out);
          if (!s.ok()) return s;
          return out;
        });
    py::list results;
    size_t next = 0;
    for (const std::string& n : names) {
      if (n.find(':') == std::string::npos) {
        results.append(py::none());
      } else {
        results.append(ToNumpy(std::move(outputs[next++])));
      }
    }
    if (single) return results[0];
    return std::move(results);
  }

  void Close() {
    std::shared_ptr<Session> session = std::move(session_);
    if (session == nullptr) return;
    CallWithoutGil([&] { return session->Close(); });
  }

 private:
  std::shared_ptr<Session> Current() {
    if (session_ == nullptr) {
      ThrowStatus(
          absl::FailedPreconditionError("Attempted to use a closed Session."));
    }
    return session_;
  }

  GraphDef graph_;
  absl::Duration default_timeout_ = absl::ZeroDuration();
  std::shared_ptr<Session> session_;
};

}  // namespace

void DefineRuntime(py::module_& m) {
  py::class_<runtime::Server, std::shared_ptr<runtime::Server>>(m, "Server",
                                                                R"doc(
A task of a cluster: TensorFlow's tf.distribute.Server.

    server = cohort.Server({"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
                           job_name="worker", task_index=0)
    server.target   # 'grpc://127.0.0.1:2222'
    server.join()   # serves until stop() (or Ctrl-C)

Every server hosts a master and a worker and checks the job token on every
call: token= or COHORT_JOB_TOKEN (insecure=True serves without one). Under
`cohort launch` it joins the launcher's coordination service; elsewhere the
cluster runs its own (coordination=False: none).)doc")
      .def(py::init(&MakeServer), py::arg("server_or_cluster_def"),
           py::arg("job_name") = py::none(), py::arg("task_index") = py::none(),
           py::arg("protocol") = py::none(), py::arg("start") = true,
           py::arg("token") = py::none(), py::arg("insecure") = false,
           py::arg("coordination") = true, py::arg("num_threads") = 0)
      .def_static(
          "create_local_server",
          [](bool start, std::optional<std::string> token, bool insecure,
             bool coordination, int num_threads) {
            // TF's create_local_server: one task on a port the OS picks.
            py::list addresses;
            addresses.append("localhost:0");
            py::dict cluster;
            cluster["localhost"] = addresses;
            return MakeServer(cluster, std::string("localhost"), 0,
                              std::string("grpc"), start, std::move(token),
                              insecure, coordination, num_threads);
          },
          py::arg("start") = true, py::arg("token") = py::none(),
          py::arg("insecure") = false, py::arg("coordination") = true,
          py::arg("num_threads") = 0,
          "A one-task server on localhost on a port the OS picks "
          "(TensorFlow's Server.create_local_server); its target is "
          "'grpc://localhost:<that port>'. Any cluster of one task may give "
          "port 0 the same way; in a larger cluster port 0 is refused "
          "(InvalidArgumentError), as the other tasks could not find it.")
      .def_property_readonly("target", &runtime::Server::target,
                             "grpc://host:port, for cohort.Session.")
      .def_property_readonly("task_name", &runtime::Server::task_name)
      .def(
          "start",
          [](runtime::Server& s) { CallWithoutGil([&] { return s.Start(); }); },
          "Starts serving (a no-op when started).")
      .def(
          "stop",
          [](runtime::Server& s) { CallWithoutGil([&] { return s.Stop(); }); },
          "Stops: in-flight steps end with UnavailableError.")
      .def(
          "join",
          [](std::shared_ptr<runtime::Server> s) {
            CallInterruptible([s] { return s->Join(); },
                              [s] { s->Stop().IgnoreError(); });
          },
          "Blocks until the server stops. Ctrl-C stops it and raises "
          "KeyboardInterrupt.");

  py::class_<PySession>(m, "Session", R"doc(
A session on a cluster's master (or in this process when target is ""):
TensorFlow's tf.compat.v1.Session.

    with cohort.Session(server.target, graph="model.pbtxt") as sess:
        sess.run("init")                               # an op: None
        y = sess.run("y:0", feed_dict={"x": np.ones(2, np.float32)})

Fetches are names: "node:0" fetches a tensor (a NumPy array that shares the
tensor's memory), "node" runs an op (None). feed_dict maps placeholder names
to arrays, lists or scalars (lists take the placeholder's dtype). Errors
are the master's, naming the node, device or task.

config= is the session's ConfigProto as a dict (its JSON form). A task of a
between-graph job with collective ops names the group leader and keeps its
master to its own task, as CollectiveAllReduceStrategy does:

    config = {"experimental": {"collective_group_leader":
                               "/job:chief/replica:0/task:0"},
              "device_filters": ["/job:worker/task:0"]}
    sess = cohort.Session(server.target, graph="task.pbtxt", config=config))doc")
      .def(py::init<const std::string&, py::handle, std::optional<std::string>,
                    std::optional<double>, py::handle>(),
           py::arg("target") = "", py::arg("graph") = py::none(),
           py::arg("token") = py::none(), py::arg("timeout") = py::none(),
           py::arg("config") = py::none(),
           "graph: a GraphDef file (.pb, .pbtxt) or serialized bytes. "
           "token: the job token (default COHORT_JOB_TOKEN). timeout: the "
           "default step deadline in seconds (None: none; it overrides "
           "config's operation_timeout_in_ms). config: the session's "
           "ConfigProto as a dict in its JSON form (proto/cohort/"
           "config.proto), e.g. {\"experimental\": "
           "{\"collective_group_leader\": \"/job:chief/replica:0/task:0\"}, "
           "\"device_filters\": [\"/job:worker/task:1\"]}; a wrong key or "
           "type raises InvalidArgumentError (a ValueError) naming it. With "
           "target \"\" only intra_op_parallelism_threads and "
           "operation_timeout_in_ms apply; other keys are refused.")
      .def("run", &PySession::Run, py::arg("fetches"),
           py::arg("feed_dict") = py::none(), py::arg("timeout") = py::none(),
           "Runs one step; returns one value for a str, a list for a list.")
      .def("close", &PySession::Close, "Closes the session on the master.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySession& s, py::args) { s.Close(); });
}

}  // namespace cohort::python
