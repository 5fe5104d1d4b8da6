#include "error.h"
#include "manifest.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace cellm {
namespace {

namespace fs = std::filesystem;

const fs::path source = "/srv/cellm/m.toml";

Manifest parse(const std::string& text) { return parse_manifest(text, source); }

// The whole message of the error that parsing `text` throws.
std::string error_of(const std::string& text) {
    try {
        parse(text);
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
        return e.what();
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return {};
}

const std::string model = "[model]\npath = \"m.gguf\"\n";

TEST(Manifest, ReadsEveryKey) {
    const Manifest m = parse(R"([model]
path = "models/SmolLM2.gguf"
format = "gguf"
arch = "llama"
[backend]
name = "blocks"
threads = 3
device = "0"
fast = true
ratio = 0.5
lanes = 8
[context]
length = 512
block_size = 32
[sampling]
temperature = 0.7
top_k = 20
top_p = 0.9
min_p = 0.1
repeat_penalty = 1.1
repeat_last_n = 32
seed = 42
max_tokens = 64
stop = ["\n\nUser:", "</s>"]
[chat]
template = "chatml"
system_prompt = "Be brief."
[plugins]
paths = ["../plugins", "/opt/cellm/plugins"]
)");
    EXPECT_EQ(m.source, source);
    EXPECT_EQ(m.model.path, fs::path("/srv/cellm/models/SmolLM2.gguf"));
    EXPECT_EQ(m.model.format, "gguf");
    EXPECT_EQ(m.model.arch, "llama");
    EXPECT_EQ(m.backend.name, "blocks");
    EXPECT_EQ(m.backend.threads, 3);
    EXPECT_EQ(m.backend.options, (std::map<std::string, std::string>{
                                     {"device", "0"}, {"fast", "true"}, {"lanes", "8"}, {"ratio", "0.5"}, {"threads", "3"}}));
    EXPECT_EQ(m.context.length, 512);
    EXPECT_EQ(m.context.block_size, 32);
    const SamplingParams& s = m.generation.sampling;
    EXPECT_FLOAT_EQ(s.temperature, 0.7f);
    EXPECT_EQ(s.top_k, 20);
    EXPECT_FLOAT_EQ(s.top_p, 0.9f);
    EXPECT_FLOAT_EQ(s.min_p, 0.1f);
    EXPECT_FLOAT_EQ(s.repeat_penalty, 1.1f);
    EXPECT_EQ(s.repeat_last_n, 32);
    EXPECT_EQ(s.seed, 42u);
    EXPECT_TRUE(m.generation.seed_given);
    EXPECT_EQ(m.generation.max_tokens, 64);
    EXPECT_EQ(m.generation.stop, (std::vector<std::string>{"\n\nUser:", "</s>"}));
    EXPECT_EQ(m.chat.template_name, "chatml");
    EXPECT_EQ(m.chat.system_prompt, "Be brief.");
    EXPECT_EQ(m.plugin_paths, (std::vector<fs::path>{"/srv/plugins", "/opt/cellm/plugins"}));
}

TEST(Manifest, DefaultsFillOmittedKeys) {
    const Manifest m = parse(model);
    EXPECT_EQ(m.model.path, fs::path("/srv/cellm/m.gguf"));
    EXPECT_EQ(m.model.format, "");
    EXPECT_EQ(m.model.arch, "");
    EXPECT_EQ(m.model.mmproj, fs::path());
    EXPECT_EQ(m.backend.name, "scalar");
    EXPECT_EQ(m.backend.threads, physical_core_count());
    EXPECT_GE(m.backend.threads, 1);
    EXPECT_EQ(m.backend.options.at("threads"), std::to_string(m.backend.threads));
    EXPECT_EQ(m.context.length, 2048);
    EXPECT_EQ(m.context.block_size, 16);
    const SamplingParams& s = m.generation.sampling;
    EXPECT_FLOAT_EQ(s.temperature, 0.8f);
    EXPECT_EQ(s.top_k, 40);
    EXPECT_FLOAT_EQ(s.top_p, 0.95f);
    EXPECT_FLOAT_EQ(s.min_p, 0.05f);
    EXPECT_FLOAT_EQ(s.repeat_penalty, 1.0f);
    EXPECT_EQ(s.repeat_last_n, 64);
    EXPECT_FALSE(m.generation.seed_given);
    EXPECT_EQ(m.generation.max_tokens, 256);
    EXPECT_TRUE(m.generation.stop.empty());
    EXPECT_EQ(m.chat.template_name, "auto");
    EXPECT_FALSE(m.chat.system_prompt.has_value());
    EXPECT_TRUE(m.plugin_paths.empty());
}

TEST(Manifest, AcceptsIntegersForFloatKeys) {
    EXPECT_FLOAT_EQ(parse(model + "[sampling]\ntemperature = 0\ntop_p = 1\n").generation.sampling.temperature, 0.0f);
}

TEST(Manifest, ExpandsHomeAndEnvironmentVariables) {
    ::setenv("HOME", "/home/tester", 1);
    ::setenv("CELLM_TEST_MODELS", "/data/models", 1);
    EXPECT_EQ(parse("[model]\npath = \"~/m.gguf\"\n").model.path, fs::path("/home/tester/m.gguf"));
    EXPECT_EQ(parse("[model]\npath = \"${CELLM_TEST_MODELS}/x/m.gguf\"\n").model.path,
              fs::path("/data/models/x/m.gguf"));
    ::unsetenv("CELLM_TEST_UNSET");
    EXPECT_EQ(error_of("[model]\npath = \"${CELLM_TEST_UNSET}/m.gguf\"\n"),
              "/srv/cellm/m.toml:2:8: model.path: environment variable CELLM_TEST_UNSET is not set");
    EXPECT_EQ(error_of("[model]\npath = \"${HOME/m.gguf\"\n"), "/srv/cellm/m.toml:2:8: model.path: unterminated ${ in path");
}

TEST(Manifest, ReportsSyntaxErrorsWithPosition) {
    EXPECT_EQ(error_of("[model\npath = 1\n").rfind("/srv/cellm/m.toml:1:", 0), 0u);
    EXPECT_NE(error_of(model + "[sampling]\ntop_k = \n").find("/srv/cellm/m.toml:4:"), std::string::npos);
}

TEST(Manifest, RejectsUnknownKeysSuggestingTheNearest) {
    EXPECT_EQ(error_of(model + "[sampling]\ntemprature = 0.5\n"),
              "/srv/cellm/m.toml:4:1: sampling.temprature: unknown key (did you mean 'temperature'?)");
    EXPECT_EQ(error_of(model + "[sampling]\nbanana = 1\n"),
              "/srv/cellm/m.toml:4:1: sampling.banana: unknown key (expected one of: temperature, top_k, top_p, "
              "min_p, repeat_penalty, repeat_last_n, seed, max_tokens, stop)");
    EXPECT_EQ(error_of(model + "[contxt]\nlength = 1\n"),
              "/srv/cellm/m.toml:3:2: contxt: unknown section (did you mean 'context'?)");
}

TEST(Manifest, RejectsWrongTypes) {
    EXPECT_EQ(error_of(model + "[sampling]\ntop_k = \"40\"\n"),
              "/srv/cellm/m.toml:4:9: sampling.top_k: expected an integer, got a string");
    EXPECT_EQ(error_of(model + "[sampling]\ntemperature = true\n"),
              "/srv/cellm/m.toml:4:15: sampling.temperature: expected a number, got a boolean");
    EXPECT_EQ(error_of(model + "[sampling]\nstop = \"x\"\n"),
              "/srv/cellm/m.toml:4:8: sampling.stop: expected an array of strings, got a string");
    EXPECT_EQ(error_of(model + "[sampling]\nstop = [\"a\", 1]\n"),
              "/srv/cellm/m.toml:4:14: sampling.stop[1]: expected a string, got an integer");
    EXPECT_EQ(error_of("sampling = 3\n" + model), "/srv/cellm/m.toml:1:12: sampling: expected a table, got an integer");
    EXPECT_EQ(error_of(model + "[backend]\nlist = [1]\n"),
              "/srv/cellm/m.toml:4:8: backend.list: expected a string, number or boolean, got an array");
    EXPECT_EQ(error_of("[model]\npath = 5\n"), "/srv/cellm/m.toml:2:8: model.path: expected a string, got an integer");
}

TEST(Manifest, RejectsOutOfRangeValues) {
    const auto first_line_of = [](const std::string& message) { return message.substr(message.find(": ") + 2); };
    const std::pair<std::string, std::string> cases[] = {
        {"[sampling]\ntemperature = -0.1", "sampling.temperature: must be at least 0, got -0.1"},
        {"[sampling]\ntop_p = 0", "sampling.top_p: must be in (0, 1], got 0"},
        {"[sampling]\ntop_p = 1.5", "sampling.top_p: must be in (0, 1], got 1.5"},
        {"[sampling]\nmin_p = 2", "sampling.min_p: must be in [0, 1], got 2"},
        {"[sampling]\ntop_k = -1", "sampling.top_k: must be at least 0 (0 disables), got -1"},
        {"[sampling]\nrepeat_penalty = 0", "sampling.repeat_penalty: must be greater than 0, got 0"},
        {"[sampling]\nrepeat_last_n = -1", "sampling.repeat_last_n: must be at least 0, got -1"},
        {"[sampling]\nseed = -1", "sampling.seed: must be at least 0, got -1"},
        {"[sampling]\nmax_tokens = 0", "sampling.max_tokens: must be at least 1, got 0"},
        {"[sampling]\nmax_tokens = 4294967296", "sampling.max_tokens: 4294967296 is out of range"},
        {"[sampling]\nstop = [\"\"]", "sampling.stop: stop strings must not be empty"},
        {"[sampling]\ntemperature = inf", "sampling.temperature: must be at least 0, got inf"},
        {"[backend]\nthreads = 0", "backend.threads: must be at least 1, got 0"},
        {"[backend]\nname = \"\"", "backend.name: must not be empty"},
        {"[context]\nlength = 0", "context.length: must be at least 1, got 0"},
        {"[context]\nblock_size = 3", "context.block_size: must be a power of two from 1 to 256, got 3"},
        {"[context]\nblock_size = 512", "context.block_size: must be a power of two from 1 to 256, got 512"},
        {"[context]\nblock_size = 0", "context.block_size: must be a power of two from 1 to 256, got 0"},
        {"[chat]\ntemplate = \"vicuna\"",
         "chat.template: unknown template 'vicuna' (expected one of: auto, jinja, chatml, llama3, gemma, plain)"},
    };
    for (const auto& [text, expected] : cases) {
        const std::string message = error_of(model + text + "\n");
        EXPECT_EQ(message.rfind("/srv/cellm/m.toml:4:", 0), 0u) << message;
        EXPECT_EQ(first_line_of(message), expected);
    }
}

TEST(Manifest, ReadsAnMmprojBesideTheModel) {
    // llama.cpp's mmproj file, resolved like the model's path.
    EXPECT_EQ(parse("[model]\npath = \"m.gguf\"\nmmproj = \"vision/mmproj.gguf\"\n").model.mmproj,
              fs::path("/srv/cellm/vision/mmproj.gguf"));
    EXPECT_EQ(error_of("[model]\npath = \"m.gguf\"\nmmproj = \"\"\n"),
              "/srv/cellm/m.toml:3:10: model.mmproj: path must not be empty");
}

TEST(Manifest, RequiresTheModelPath) {
    EXPECT_EQ(error_of("[backend]\nname = \"scalar\"\n"), "/srv/cellm/m.toml: model.path: required key is missing (the model file to load)");
    EXPECT_EQ(error_of("[model]\narch = \"llama\"\n"),
              "/srv/cellm/m.toml:1:1: model.path: required key is missing (the model file to load)");
    EXPECT_EQ(error_of("[model]\npath = \"\"\n"), "/srv/cellm/m.toml:2:8: model.path: path must not be empty");
}

TEST(Manifest, LoadReportsUnreadableFiles) {
    const fs::path missing = fs::temp_directory_path() / "cellm-manifest-test-missing.toml";
    try {
        load_manifest(missing);
        FAIL() << "expected cellm::Error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), missing.string() + ": cannot read manifest: No such file or directory");
    }
    EXPECT_THROW(load_manifest(fs::temp_directory_path()), Error);
}

TEST(Manifest, LoadResolvesPathsAgainstTheManifestFolder) {
    const fs::path folder = fs::temp_directory_path() / "cellm-manifest-test";
    fs::create_directories(folder);
    const fs::path file = folder / "session.toml";
    std::ofstream(file) << "[model]\npath = \"../models/m.gguf\"\n[plugins]\npaths = [\"plugins\"]\n";
    const Manifest m = load_manifest(file);
    EXPECT_EQ(m.model.path, (folder.parent_path() / "models/m.gguf").lexically_normal());
    EXPECT_EQ(m.plugin_paths, std::vector<fs::path>{folder / "plugins"});
    fs::remove_all(folder);
}

// Every prefix of a valid manifest either parses or fails with one cellm::Error line; nothing else escapes.
TEST(Manifest, TruncatedTextFailsCleanly) {
    std::ifstream in(fs::path(CELLM_SOURCE_DIR) / "config/smollm2-135m.toml");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(text.empty());
    for (size_t length = 0; length <= text.size(); ++length) {
        try {
            parse(text.substr(0, length));
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
    }
}

TEST(Manifest, ShippedSmolLM2ManifestLoads) {
    ::setenv("HOME", "/home/tester", 1);
    const Manifest m = load_manifest(fs::path(CELLM_SOURCE_DIR) / "config/smollm2-135m.toml");
    EXPECT_EQ(m.model.path, fs::path("/home/tester/.cache/cellm/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    EXPECT_EQ(m.backend.name, "openblas");
    EXPECT_EQ(m.backend.threads, 2);
    EXPECT_EQ(m.chat.template_name, "auto");
    EXPECT_EQ(m.plugin_paths, std::vector<fs::path>{fs::path(CELLM_SOURCE_DIR) / "build/bin/plugins"});
}

}  // namespace
}  // namespace cellm

namespace cellm {
namespace {

TEST(ManifestServing, ReadsSessionsSchedulerPolicyAndKvKeys) {
    const Manifest m = parse(model + R"([context]
kv_type = "q8"
kv_memory_mib = 64
prefix_cache = false
[sampling]
temperature = 0.5
seed = 7
max_tokens = 30
stop = ["END"]
[scheduler]
token_budget = 128
max_running = 4
[policy]
max_batch = 2
max_tokens_per_second = 12.5
[[session]]
name = "chat"
prompt = "Hello"
[[session]]
name = "batch"
prompt = "Summarise"
priority = "background"
temperature = 0
max_tokens = 5
stop = []
chat = false
[[session]]
name = "numeric"
prompt = "x"
priority = 7
)");
    EXPECT_EQ(m.context.kv_type, "q8");
    EXPECT_EQ(m.context.kv_memory_mib, 64);
    EXPECT_FALSE(m.context.prefix_cache);
    EXPECT_EQ(m.scheduler.token_budget, 128);
    EXPECT_EQ(m.scheduler.max_running, 4);
    EXPECT_EQ(m.policy.max_batch, 2);
    EXPECT_DOUBLE_EQ(m.policy.max_tokens_per_second, 12.5);
    ASSERT_EQ(m.sessions.size(), 3u);
    // A session inherits [sampling] and overrides what it names.
    EXPECT_EQ(m.sessions[0].name, "chat");
    EXPECT_EQ(m.sessions[0].prompt, "Hello");
    EXPECT_FLOAT_EQ(m.sessions[0].generation.sampling.temperature, 0.5f);
    EXPECT_EQ(m.sessions[0].generation.sampling.seed, 7u);
    EXPECT_EQ(m.sessions[0].generation.max_tokens, 30);
    EXPECT_EQ(m.sessions[0].generation.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(m.sessions[0].priority, 1);
    EXPECT_FALSE(m.sessions[0].chat.has_value());
    EXPECT_FLOAT_EQ(m.sessions[1].generation.sampling.temperature, 0.0f);
    EXPECT_EQ(m.sessions[1].generation.max_tokens, 5);
    EXPECT_TRUE(m.sessions[1].generation.stop.empty());
    EXPECT_EQ(m.sessions[1].priority, 0);
    EXPECT_EQ(m.sessions[1].chat, false);
    EXPECT_EQ(m.sessions[2].priority, 7);
}

TEST(Manifest, RelativeManifestInTheCurrentFolderResolvesPaths) {
    const Manifest m = parse_manifest(model, "m.toml");
    EXPECT_EQ(m.model.path, (fs::current_path() / "m.gguf").lexically_normal());
}

TEST(ManifestServing, ShippedSessionsManifestLoads) {
    const Manifest m = load_manifest(fs::path(CELLM_SOURCE_DIR) / "config/smollm2-sessions.toml");
    ASSERT_EQ(m.sessions.size(), 3u);
    EXPECT_EQ(m.sessions[2].priority, 0);
    EXPECT_EQ(m.context.kv_memory_mib, 64);
}

TEST(ManifestServing, DefaultsWithoutTheNewSections) {
    const Manifest m = parse(model);
    EXPECT_EQ(m.context.kv_type, "f16");
    EXPECT_EQ(m.context.kv_memory_mib, 0);
    EXPECT_TRUE(m.context.prefix_cache);
    EXPECT_EQ(m.scheduler.token_budget, 256);
    EXPECT_EQ(m.scheduler.max_running, 8);
    EXPECT_EQ(m.policy.max_batch, 0);
    EXPECT_EQ(m.policy.max_tokens_per_second, 0.0);
    EXPECT_TRUE(m.sessions.empty());
}

TEST(ManifestServing, RejectsBadSessionsAndLimits) {
    const std::pair<std::string, std::string> cases[] = {
        {"[context]\nkv_type = \"q4\"\n", "context.kv_type: unknown KV type 'q4'"},
        {"[context]\nkv_memory_mib = 0\n", "context.kv_memory_mib: must be from 1"},
        {"[context]\nmemory_budget_mib = 0\n", "context.memory_budget_mib: must be from 1"},
        {"[context]\nkv_memory_mib = 64\nmemory_budget_mib = 300\n", "give memory_budget_mib or kv_memory_mib, not both"},
        {"[context]\nprefix_cache = \"yes\"\n", "context.prefix_cache: expected a boolean"},
        {"[scheduler]\ntoken_budget = 0\n", "scheduler.token_budget: must be from 1"},
        {"[scheduler]\nmax_runing = 2\n", "did you mean 'max_running'"},
        {"[policy]\nmax_tokens_per_second = -1\n", "policy.max_tokens_per_second: must be at least 0"},
        {"[policy]\nmax_batch = 1.5\n", "policy.max_batch: expected an integer"},
        {"[[session]]\nprompt = \"hi\"\n", "session[0].name: every session needs a name"},
        {"[[session]]\nname = \"a\"\n", "session[0].prompt: every session needs a prompt"},
        {"[[session]]\nname = \"a\"\nprompt = \"\"\n", "session[0].prompt: must not be empty"},
        {"[[session]]\nname = \"a\"\nprompt = \"x\"\n[[session]]\nname = \"a\"\nprompt = \"y\"\n",
         "session[1].name: 'a' names two sessions"},
        {"[[session]]\nname = \"a\"\nprompt = \"x\"\npriority = \"urgent\"\n", "unknown priority 'urgent'"},
        {"[[session]]\nname = \"a\"\nprompt = \"x\"\npriority = -1\n", "session[0].priority: must be interactive"},
        {"[[session]]\nname = \"a\"\nprompt = \"x\"\ntemperature = -1\n", "session[0].temperature: must be at least 0"},
        {"[[session]]\nname = \"a\"\nprompt = \"x\"\nstop = [\"\"]\n", "session[0].stop: stop strings must not be empty"},
        {"[[session]]\nname = \"a\"\nprompt = \"x\"\nmodel = \"y\"\n", "session[0].model: unknown key"},
    };
    for (const auto& [text, needle] : cases) {
        const std::string message = error_of(model + text);
        EXPECT_NE(message.find(needle), std::string::npos) << "for:\n" << text << "got: " << message;
    }
    EXPECT_NE(error_of("session = 3\n" + model).find("session: expected an array of tables"), std::string::npos);
}

}  // namespace
}  // namespace cellm

namespace cellm {
namespace {

TEST(Manifest, ServerSectionKeysAreOptional) {
    const Manifest none = parse(model);
    EXPECT_FALSE(none.serve.host || none.serve.port || none.serve.header_timeout || none.serve.workers);
    const Manifest m = parse(model + "[server]\nhost = \"::1\"\nport = 0\nmax_body_bytes = 4096\nheader_timeout = 2.5\n"
                                     "body_timeout = 3\nmin_body_rate = 100\nidle_timeout = 1\nwrite_timeout = 60\n"
                                     "max_connections = 100\nmax_connections_per_client = 0\nworkers = 8\n"
                                     "max_waiting = 16\nmax_request_seconds = 0\n");
    EXPECT_EQ(m.serve.host, "::1");
    EXPECT_EQ(m.serve.port, 0);
    EXPECT_EQ(m.serve.max_body_bytes, 4096);
    EXPECT_EQ(m.serve.header_timeout, 2.5f);
    EXPECT_EQ(m.serve.body_timeout, 3.0f);
    EXPECT_EQ(m.serve.min_body_rate, 100);
    EXPECT_EQ(m.serve.idle_timeout, 1.0f);
    EXPECT_EQ(m.serve.write_timeout, 60.0f);
    EXPECT_EQ(m.serve.max_connections, 100);
    EXPECT_EQ(m.serve.max_connections_per_client, 0);
    EXPECT_EQ(m.serve.workers, 8);
    EXPECT_EQ(m.serve.max_waiting, 16);
    EXPECT_EQ(m.serve.max_request_seconds, 0.0f);
}

TEST(Manifest, ServerSectionRefusesBadValues) {
    const auto message_of = [](const std::string& text) {
        const std::string message = error_of(model + "[server]\n" + text + "\n");
        return message.substr(message.find(": ") + 2);
    };
    EXPECT_EQ(message_of("port = 70000"), "server.port: must be from 0 to 65535, got 70000");
    EXPECT_EQ(message_of("header_timeout = 0"), "server.header_timeout: must be from 0.001 to 86400 seconds, got 0");
    EXPECT_EQ(message_of("workers = 0"), "server.workers: must be from 1 to 4096, got 0");
    EXPECT_EQ(message_of("max_waiting = -2"), "server.max_waiting: must be at least 1, got -2");
    EXPECT_EQ(message_of("max_connections_per_client = -1"),
              "server.max_connections_per_client: must be at least 0 (0: no cap), got -1");
    EXPECT_EQ(message_of("max_request_seconds = -1"),
              "server.max_request_seconds: must be from 0 (no limit) to 604800 seconds, got -1");
    EXPECT_EQ(message_of("idle_timeout = \"5\""), "server.idle_timeout: expected a number, got a string");
    EXPECT_NE(message_of("idle_timeot = 5").find("did you mean 'idle_timeout'"), std::string::npos);
}

}  // namespace
}  // namespace cellm
