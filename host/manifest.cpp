#include "manifest.h"

#include "error.h"

#include <sched.h>
#include <spdlog/fmt/fmt.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

namespace cellm {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view chat_templates[] = {"auto", "jinja", "chatml", "llama3", "gemma", "plain"};
constexpr std::string_view kv_types[] = {"f32", "f16", "q8", "r4", "r3"};

std::string_view type_name(toml::node_type type) {
    switch (type) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
    }
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
            diagonal = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
        }
    }
    return row[b.size()];
}

// One table of the manifest, with the reading and checking every section needs. Errors point at the offending
// node and name the key by its dotted path.
class Section {
public:
    Section(const std::string& file, const toml::table& table, std::string name)
        : file_(file), table_(table), name_(std::move(name)) {}

    std::string key_path(std::string_view key) const { return name_.empty() ? std::string(key) : name_ + "." + std::string(key); }

    // A region without a position (an absent table) names the file alone.
    [[noreturn]] void fail(const toml::source_region& at, std::string_view key, std::string_view message) const {
        if (at.begin.line == 0) throw Error(fmt::format("{}: {}: {}", file_, key, message));
        throw Error(fmt::format("{}:{}:{}: {}: {}", file_, at.begin.line, at.begin.column, key, message));
    }

    // Rejects keys outside `known`, naming the closest known key when the unknown one looks like a typo.
    void reject_unknown(std::initializer_list<std::string_view> known) const {
        for (auto&& [key, node] : table_) {
            const std::string_view name = key.str();
            if (std::find(known.begin(), known.end(), name) != known.end()) continue;
            std::string message = name_.empty() ? "unknown section" : "unknown key";
            std::string_view nearest;
            size_t best = std::numeric_limits<size_t>::max();
            for (const std::string_view candidate : known) {
                const size_t distance = edit_distance(name, candidate);
                if (distance < best) best = distance, nearest = candidate;
            }
            if (best <= 2 && best < name.size()) message += fmt::format(" (did you mean '{}'?)", nearest);
            else message += fmt::format(" (expected one of: {})", fmt::join(known, ", "));
            fail(key.source(), key_path(name), message);
        }
    }

    const toml::node* find(std::string_view key) const { return table_.get(key); }

    // A sub-table such as [sampling]; empty when absent.
    Section section(std::string_view key) const {
        static const toml::table empty;
        const toml::node* node = find(key);
        if (node == nullptr) return Section(file_, empty, key_path(key));
        if (!node->is_table()) wrong_type(*node, key_path(key), "a table");
        return Section(file_, *node->as_table(), key_path(key));
    }

    template <class Int>
    void integer(std::string_view key, Int& out, const std::function<bool(int64_t)>& valid,
                 std::string_view requirement) const {
        const toml::node* node = find(key);
        if (node == nullptr) return;
        if (!node->is_integer()) wrong_type(*node, key_path(key), "an integer");
        const int64_t value = node->as_integer()->get();
        if (!valid(value)) fail(node->source(), key_path(key), fmt::format("{}, got {}", requirement, value));
        if (!std::in_range<Int>(value)) fail(node->source(), key_path(key), fmt::format("{} is out of range", value));
        out = static_cast<Int>(value);
    }

    // Integers are accepted where a float is expected (temperature = 1).
    void number(std::string_view key, float& out, const std::function<bool(double)>& valid,
                std::string_view requirement) const {
        const toml::node* node = find(key);
        if (node == nullptr) return;
        if (!node->is_number()) wrong_type(*node, key_path(key), "a number");
        const double value = *node->value<double>();
        if (!std::isfinite(value) || !valid(value))
            fail(node->source(), key_path(key), fmt::format("{}, got {}", requirement, value));
        out = static_cast<float>(value);
    }

    void boolean(std::string_view key, bool& out) const {
        const toml::node* node = find(key);
        if (node == nullptr) return;
        if (!node->is_boolean()) wrong_type(*node, key_path(key), "a boolean");
        out = node->as_boolean()->get();
    }

    // Returns the string's node (for later errors about its content), or nullptr when absent.
    const toml::node* string(std::string_view key, std::string& out) const {
        const toml::node* node = find(key);
        if (node == nullptr) return nullptr;
        if (!node->is_string()) wrong_type(*node, key_path(key), "a string");
        out = node->as_string()->get();
        return node;
    }

    // Each element with its node, for per-element errors.
    std::vector<std::pair<std::string, const toml::node*>> strings(std::string_view key) const {
        std::vector<std::pair<std::string, const toml::node*>> out;
        const toml::node* node = find(key);
        if (node == nullptr) return out;
        if (!node->is_array()) wrong_type(*node, key_path(key), "an array of strings");
        const toml::array& array = *node->as_array();
        for (size_t i = 0; i < array.size(); ++i) {
            const toml::node& element = array[i];
            if (!element.is_string()) wrong_type(element, fmt::format("{}[{}]", key_path(key), i), "a string");
            out.emplace_back(element.as_string()->get(), &element);
        }
        return out;
    }

    [[noreturn]] void wrong_type(const toml::node& node, std::string_view key, std::string_view expected) const {
        fail(node.source(), key, fmt::format("expected {}, got {}", expected, type_name(node.type())));
    }

    const toml::table& table() const { return table_; }
    const std::string& file() const { return file_; }
    const std::string& name() const { return name_; }

private:
    const std::string& file_;
    const toml::table& table_;
    std::string name_;
};

// Expands a leading ~ and ${VAR}, then anchors a relative path at the manifest's folder.
fs::path resolve_path(const Section& section, std::string_view key, const toml::node& node, const std::string& text,
                      const fs::path& base) {
    const std::string where = section.key_path(key);
    if (text.empty()) section.fail(node.source(), where, "path must not be empty");
    const auto variable = [&](const std::string& name) {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) section.fail(node.source(), where, fmt::format("environment variable {} is not set", name));
        return std::string(value);
    };
    std::string expanded;
    size_t i = 0;
    if (text[0] == '~' && (text.size() == 1 || text[1] == '/')) {
        expanded = variable("HOME");
        i = 1;
    }
    while (i < text.size()) {
        if (text.compare(i, 2, "${") != 0) {
            expanded += text[i++];
            continue;
        }
        const size_t close = text.find('}', i + 2);
        if (close == std::string::npos) section.fail(node.source(), where, "unterminated ${ in path");
        expanded += variable(text.substr(i + 2, close - i - 2));
        i = close + 1;
    }
    fs::path path(expanded);
    // A manifest named without a folder ("m.toml") has an empty parent: its folder is the current one.
    if (path.is_relative()) path = fs::absolute(base.empty() ? fs::path(".") : base) / path;
    return path.lexically_normal();
}

bool is_power_of_two_up_to_256(int64_t v) { return v >= 1 && v <= 256 && (v & (v - 1)) == 0; }

void read_model(const Section& root, const fs::path& base, ModelConfig& model) {
    const Section section = root.section("model");
    section.reject_unknown({"path", "format", "arch", "mmproj"});
    std::string path;
    const toml::node* path_node = section.string("path", path);
    if (path_node == nullptr)
        section.fail(section.table().source(), "model.path", "required key is missing (the model file to load)");
    model.path = resolve_path(section, "path", *path_node, path, base);
    section.string("format", model.format);
    section.string("arch", model.arch);
    std::string mmproj;
    if (const toml::node* mmproj_node = section.string("mmproj", mmproj)) {
        model.mmproj = resolve_path(section, "mmproj", *mmproj_node, mmproj, base);
    }
}

void read_backend(const Section& root, BackendConfig& backend) {
    const Section section = root.section("backend");
    backend.threads = physical_core_count();
    if (const toml::node* name = section.string("name", backend.name); name != nullptr && backend.name.empty())
        section.fail(name->source(), "backend.name", "must not be empty");
    section.integer("threads", backend.threads, [](int64_t v) { return v >= 1; }, "must be at least 1");
    // The rest is the backend's business: passed through as text, checked by the backend's create().
    for (auto&& [key, node] : section.table()) {
        const std::string_view name = key.str();
        if (name == "name" || name == "threads") continue;
        std::string text;
        if (const auto* s = node.as_string()) text = s->get();
        else if (const auto* i = node.as_integer()) text = std::to_string(i->get());
        else if (const auto* f = node.as_floating_point()) text = fmt::format("{}", f->get());
        else if (const auto* b = node.as_boolean()) text = b->get() ? "true" : "false";
        else section.wrong_type(node, section.key_path(name), "a string, number or boolean");
        backend.options.emplace(name, std::move(text));
    }
    backend.options["threads"] = std::to_string(backend.threads);
}

void read_context(const Section& root, ContextConfig& context) {
    const Section section = root.section("context");
    section.reject_unknown({"length", "block_size", "kv_type", "kv_memory_mib", "memory_budget_mib", "prefix_cache"});
    section.integer("length", context.length, [](int64_t v) { return v >= 1; }, "must be at least 1");
    section.integer("block_size", context.block_size, is_power_of_two_up_to_256, "must be a power of two from 1 to 256");
    if (const toml::node* node = section.string("kv_type", context.kv_type);
        node != nullptr && std::find(std::begin(kv_types), std::end(kv_types), context.kv_type) == std::end(kv_types))
        section.fail(node->source(), "context.kv_type",
                     fmt::format("unknown KV type '{}' (expected one of: {})", context.kv_type, fmt::join(kv_types, ", ")));
    section.integer("kv_memory_mib", context.kv_memory_mib, [](int64_t v) { return v >= 1 && v <= (1 << 20); },
                    "must be from 1 to 1048576");
    section.integer("memory_budget_mib", context.memory_budget_mib, [](int64_t v) { return v >= 1 && v <= (1 << 20); },
                    "must be from 1 to 1048576");
    if (const toml::node* budget = section.find("memory_budget_mib"); budget != nullptr && context.kv_memory_mib > 0)
        section.fail(budget->source(), "context.memory_budget_mib",
                     "give memory_budget_mib or kv_memory_mib, not both: the budget sizes the KV pool itself");
    section.boolean("prefix_cache", context.prefix_cache);
}

}  // namespace

const std::string& check_kv_type(const std::string& name) {
    if (std::find(std::begin(kv_types), std::end(kv_types), name) == std::end(kv_types))
        throw Error(fmt::format("unknown KV type '{}' (expected one of: {})", name, fmt::join(kv_types, ", ")));
    return name;
}

namespace {

uint64_t random_seed() {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// The sampling keys, shared by [sampling] and each [[session]]; `generation` holds the defaults on entry.
void read_generation(const Section& section, GenerationConfig& generation) {
    SamplingParams& p = generation.sampling;
    section.number("temperature", p.temperature, [](double v) { return v >= 0; }, "must be at least 0");
    section.integer("top_k", p.top_k, [](int64_t v) { return v >= 0; }, "must be at least 0 (0 disables)");
    section.number("top_p", p.top_p, [](double v) { return v > 0 && v <= 1; }, "must be in (0, 1]");
    section.number("min_p", p.min_p, [](double v) { return v >= 0 && v <= 1; }, "must be in [0, 1]");
    section.number("repeat_penalty", p.repeat_penalty, [](double v) { return v > 0; }, "must be greater than 0");
    section.integer("repeat_last_n", p.repeat_last_n, [](int64_t v) { return v >= 0; }, "must be at least 0");
    if (section.find("seed") != nullptr) generation.seed_given = true;
    section.integer("seed", p.seed, [](int64_t v) { return v >= 0; }, "must be at least 0");
    section.integer("max_tokens", generation.max_tokens, [](int64_t v) { return v >= 1; }, "must be at least 1");
    if (section.find("stop") != nullptr) generation.stop.clear();
    for (auto& [text, node] : section.strings("stop")) {
        if (text.empty()) section.fail(node->source(), section.key_path("stop"), "stop strings must not be empty");
        generation.stop.push_back(std::move(text));
    }
}

void read_sampling(const Section& root, GenerationConfig& generation) {
    const Section section = root.section("sampling");
    section.reject_unknown({"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed",
                            "max_tokens", "stop"});
    read_generation(section, generation);
    if (!generation.seed_given) generation.sampling.seed = random_seed();
}

void read_scheduler(const Section& root, SchedulerConfig& scheduler) {
    const Section section = root.section("scheduler");
    section.reject_unknown({"token_budget", "max_running"});
    section.integer("token_budget", scheduler.token_budget, [](int64_t v) { return v >= 1 && v <= 65536; },
                    "must be from 1 to 65536");
    section.integer("max_running", scheduler.max_running, [](int64_t v) { return v >= 1 && v <= 4096; },
                    "must be from 1 to 4096");
}

void read_policy(const Section& root, PolicyConfig& policy) {
    const Section section = root.section("policy");
    section.reject_unknown({"max_batch", "max_tokens_per_second"});
    section.integer("max_batch", policy.max_batch, [](int64_t v) { return v >= 0 && v <= 4096; },
                    "must be from 0 (no cap) to 4096");
    float rate = 0;
    section.number("max_tokens_per_second", rate, [](double v) { return v >= 0; }, "must be at least 0 (0: no cap)");
    policy.max_tokens_per_second = rate;
}

// A key given: its checked value in `out`; absent: `out` stays empty.
template <class T, class Read>
void optional_key(const Section& section, std::string_view key, std::optional<T>& out, Read read) {
    if (section.find(key) == nullptr) return;
    T value{};
    read(value);
    out = value;
}

void read_server(const Section& root, ServeConfig& serve) {
    const Section section = root.section("server");
    section.reject_unknown({"host", "port", "max_body_bytes", "header_timeout", "body_timeout", "min_body_rate",
                            "idle_timeout", "write_timeout", "max_connections", "max_connections_per_client",
                            "workers", "max_waiting", "max_request_seconds"});
    optional_key(section, "host", serve.host, [&](std::string& v) { section.string("host", v); });
    optional_key(section, "port", serve.port, [&](int32_t& v) {
        section.integer("port", v, [](int64_t x) { return x >= 0 && x <= 65535; }, "must be from 0 to 65535");
    });
    const auto positive = [](int64_t x) { return x >= 1; };
    // Named copies, not structured bindings: clang 14 cannot capture a binding in a lambda.
    for (const auto& entry : {std::pair{"max_body_bytes", &serve.max_body_bytes},
                                   std::pair{"min_body_rate", &serve.min_body_rate},
                                   std::pair{"max_connections", &serve.max_connections},
                                   std::pair{"max_waiting", &serve.max_waiting}}) {
        const char* key = entry.first;
        optional_key(section, key, *entry.second, [&](int64_t& v) { section.integer(key, v, positive, "must be at least 1"); });
    }
    optional_key(section, "max_connections_per_client", serve.max_connections_per_client, [&](int64_t& v) {
        section.integer("max_connections_per_client", v, [](int64_t x) { return x >= 0; }, "must be at least 0 (0: no cap)");
    });
    optional_key(section, "workers", serve.workers, [&](int64_t& v) {
        section.integer("workers", v, [](int64_t x) { return x >= 1 && x <= 4096; }, "must be from 1 to 4096");
    });
    for (const auto& entry : {std::pair{"header_timeout", &serve.header_timeout},
                                   std::pair{"body_timeout", &serve.body_timeout},
                                   std::pair{"idle_timeout", &serve.idle_timeout},
                                   std::pair{"write_timeout", &serve.write_timeout}}) {
        const char* key = entry.first;
        optional_key(section, key, *entry.second, [&](float& v) {
            section.number(key, v, [](double x) { return x >= 0.001 && x <= 86400; },
                           "must be from 0.001 to 86400 seconds");
        });
    }
    optional_key(section, "max_request_seconds", serve.max_request_seconds, [&](float& v) {
        section.number("max_request_seconds", v, [](double x) { return x >= 0 && x <= 86400 * 7; },
                       "must be from 0 (no limit) to 604800 seconds");
    });
}

void read_sessions(const Section& root, const GenerationConfig& defaults, std::vector<SessionConfig>& sessions) {
    const toml::node* node = root.find("session");
    if (node == nullptr) return;
    if (!node->is_array_of_tables()) root.wrong_type(*node, "session", "an array of tables ([[session]])");
    const toml::array& array = *node->as_array();
    for (size_t i = 0; i < array.size(); ++i) {
        const Section section(root.file(), *array[i].as_table(), fmt::format("session[{}]", i));
        section.reject_unknown({"name", "prompt", "priority", "chat", "temperature", "top_k", "top_p", "min_p",
                                "repeat_penalty", "repeat_last_n", "seed", "max_tokens", "stop"});
        SessionConfig s;
        s.generation = defaults;
        const toml::node* name = section.string("name", s.name);
        if (name == nullptr) section.fail(array[i].source(), section.key_path("name"), "every session needs a name");
        if (s.name.empty()) section.fail(name->source(), section.key_path("name"), "must not be empty");
        for (const SessionConfig& other : sessions) {
            if (other.name == s.name)
                section.fail(name->source(), section.key_path("name"), fmt::format("'{}' names two sessions", s.name));
        }
        if (section.string("prompt", s.prompt) == nullptr)
            section.fail(array[i].source(), section.key_path("prompt"), "every session needs a prompt");
        if (s.prompt.empty()) section.fail(section.find("prompt")->source(), section.key_path("prompt"), "must not be empty");
        if (const toml::node* p = section.find("priority")) {
            if (const auto* text = p->as_string()) {
                if (text->get() == "interactive") s.priority = 1;
                else if (text->get() == "background") s.priority = 0;
                else section.fail(p->source(), section.key_path("priority"),
                                  fmt::format("unknown priority '{}' (expected interactive, background or an integer)", text->get()));
            } else {
                section.integer("priority", s.priority, [](int64_t v) { return v >= 0 && v <= 1000; },
                                "must be interactive, background or an integer from 0 to 1000");
            }
        }
        if (section.find("chat") != nullptr) {
            bool chat = false;
            section.boolean("chat", chat);
            s.chat = chat;
        }
        read_generation(section, s.generation);
        sessions.push_back(std::move(s));
    }
}

void read_chat(const Section& root, ChatConfig& chat) {
    const Section section = root.section("chat");
    section.reject_unknown({"template", "system_prompt"});
    if (const toml::node* node = section.string("template", chat.template_name);
        node != nullptr && std::find(std::begin(chat_templates), std::end(chat_templates), chat.template_name) ==
                               std::end(chat_templates))
        section.fail(node->source(), "chat.template",
                     fmt::format("unknown template '{}' (expected one of: {})", chat.template_name,
                                 fmt::join(chat_templates, ", ")));
    std::string system_prompt;
    if (section.string("system_prompt", system_prompt) != nullptr) chat.system_prompt = std::move(system_prompt);
}

void read_plugins(const Section& root, const fs::path& base, std::vector<fs::path>& paths) {
    const Section section = root.section("plugins");
    section.reject_unknown({"paths"});
    for (const auto& [text, node] : section.strings("paths"))
        paths.push_back(resolve_path(section, "paths", *node, text, base));
}

}  // namespace

Manifest parse_manifest(std::string_view text, const std::filesystem::path& source) {
    const std::string file = source.string();
    toml::table document;
    try {
        document = toml::parse(text, file);
    } catch (const toml::parse_error& e) {
        throw Error(fmt::format("{}:{}:{}: invalid TOML: {}", file, e.source().begin.line, e.source().begin.column,
                                e.description()));
    }
    const Section root(file, document, "");
    root.reject_unknown({"model", "backend", "context", "sampling", "chat", "scheduler", "policy", "server", "session",
                         "plugins"});

    Manifest manifest;
    manifest.source = source;
    const fs::path base = source.parent_path();
    read_model(root, base, manifest.model);
    read_backend(root, manifest.backend);
    read_context(root, manifest.context);
    read_sampling(root, manifest.generation);
    read_chat(root, manifest.chat);
    read_scheduler(root, manifest.scheduler);
    read_policy(root, manifest.policy);
    read_server(root, manifest.serve);
    read_sessions(root, manifest.generation, manifest.sessions);
    read_plugins(root, base, manifest.plugin_paths);
    return manifest;
}

Manifest load_manifest(const std::filesystem::path& file) {
    std::error_code ec;
    if (fs::is_directory(file, ec)) throw Error(fmt::format("{}: is a directory, not a manifest", file.string()));
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot read manifest: {}", file.string(), std::strerror(errno)));
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw Error(fmt::format("{}: cannot read manifest: {}", file.string(), std::strerror(errno)));
    return parse_manifest(text.str(), file);
}

Manifest manifest_for_model(const std::filesystem::path& model) {
    Manifest manifest;
    manifest.source = model;
    manifest.model.path = fs::absolute(model).lexically_normal();
    manifest.backend.name.clear();
    manifest.backend.threads = physical_core_count();
    manifest.backend.options = {{"threads", std::to_string(manifest.backend.threads)}, {"precision", "fast"}};
    manifest.generation.sampling.seed = random_seed();
    manifest.sampling_from_model = true;
    return manifest;
}

// Counts distinct (package, core) pairs among the CPUs this process may run on; falls back to the logical count.
int32_t physical_core_count() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    std::set<std::pair<std::string, std::string>> cores;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
            if (!CPU_ISSET(cpu, &allowed)) continue;
            const fs::path topology = fmt::format("/sys/devices/system/cpu/cpu{}/topology", cpu);
            std::string package, core;
            if (!(std::ifstream(topology / "physical_package_id") >> package) ||
                !(std::ifstream(topology / "core_id") >> core)) {
                cores.clear();
                break;
            }
            cores.emplace(package, core);
        }
    }
    if (!cores.empty()) return static_cast<int32_t>(cores.size());
    return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace cellm
