// cellm-host as a user runs it: the commands work on a synthetic model, and every kind of bad input ends
// with one clear error line and a non-zero exit, never a crash.
#include "test_support.h"

#include "gguf_writer.h"
#include "synthetic_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

fs::path write_file(const std::string& name, const std::string& text) {
    const fs::path p = temp_dir() / name;
    std::ofstream(p) << text;
    return p;
}

fs::path manifest_for(const fs::path& model, const std::string& extra = "", const std::string& name = "m.toml") {
    return write_file(name, "[model]\npath = \"" + model.string() + "\"\n[backend]\nname = \"scalar\"\nthreads = 1\n"
                                "[context]\nlength = 128\n[sampling]\ntemperature = 0\nmax_tokens = 6\n" + extra);
}

// The error contract: non-zero exit, exactly one line on stderr, saying what is wrong.
void expect_one_error_line(const CommandResult& r, const std::string& needle) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_LT(r.exit_code, 128) << "killed by a signal";
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

TEST(Cli, PluginsListsTheBuiltPlugins) {
    const CommandResult r = run_host("plugins");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* expected : {"format   gguf", "arch     llama", "backend  scalar"}) {
        EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
    }
}

TEST(Cli, RunPrintsOneJsonObject) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q8_0));
    const CommandResult r = run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt 'the cat' --raw --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    for (const char* key : {"text", "tokens", "prompt_tokens", "ttft_ms", "prefill_tok_s", "decode_tok_s", "backend", "model"}) {
        EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_EQ(j["backend"], "scalar");
    EXPECT_GT(j["prompt_tokens"].get<int>(), 0);
    EXPECT_LE(j["tokens"].size(), 6u);
}

// A model file is enough, as for llama-cli -m: the same fields as with a manifest, the fastest CPU backend, and
// the single prompt's shape equal to a [[session]]'s (one name for one thing).
TEST(Cli, RunsAModelFileWithoutAManifest) {
    const fs::path model = synthetic_model(CELLM_TYPE_Q8_0);
    const CommandResult r = run_host("run --model " + shell_quote(model.string()) +
                                     " --prompt 'the cat' --raw --json --temperature 0 --max-tokens 5 --threads 1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["backend"], "openblas");
    EXPECT_EQ(j["generated_tokens"].get<size_t>(), j["tokens"].size());
    EXPECT_LE(j["tokens"].size(), 5u);
    const fs::path manifest = manifest_for(model, "[[session]]\nname = \"a\"\nprompt = \"the cat\"\nchat = false\n");
    const CommandResult sessions = run_host("run --manifest " + shell_quote(manifest.string()) + " --json");
    ASSERT_EQ(sessions.exit_code, 0) << sessions.err;
    const auto listed = nlohmann::json::parse(sessions.out)["sessions"][0];
    for (auto& [key, value] : j.items()) {
        if (key != "backend" && key != "model") {
            EXPECT_TRUE(listed.contains(key)) << key;
        }
    }
    EXPECT_EQ(listed.size() + 2, j.size());

    for (const char* command : {"run --prompt hi", "serve", "chat", "bench"}) {
        SCOPED_TRACE(command);
        expect_one_error_line(run_host(command), "give --model FILE");
    }
    for (const char* command : {"run --prompt hi", "serve", "bench"}) {
        SCOPED_TRACE(command);
        expect_one_error_line(run_host(std::string(command) + " --memory-budget 1 --model " + shell_quote(model.string())),
                              "a memory budget of 1 MiB does not hold this model");
    }
}

// Without a manifest the file's own sampling advice (llama.cpp's general.sampling.* keys) is the default: a file
// that says temperature 0 generates greedily whatever the seed; a value out of range is skipped with a warning.
TEST(Cli, AModelFileBringsItsSamplingDefaults) {
    synthetic::ModelOptions options;
    options.weight_type = CELLM_TYPE_Q8_0;
    gguf::Writer greedy_file = synthetic::build_model(options);
    greedy_file.add("general.sampling.temp", 0.0f);
    greedy_file.add("general.sampling.top_k", int32_t{1000});
    const fs::path greedy = temp_dir() / "tiny-sampling-greedy.gguf";
    greedy_file.write(greedy.string());
    const std::string run = "run --model " + shell_quote(greedy.string()) + " --prompt 'the cat' --raw --json --max-tokens 8";
    const CommandResult want = run_host(run + " --temperature 0");
    ASSERT_EQ(want.exit_code, 0) << want.err;
    for (const char* seed : {"1", "2", "3"}) {
        const CommandResult r = run_host(run + " --seed " + seed);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], nlohmann::json::parse(want.out)["tokens"]) << "seed " << seed;
    }

    gguf::Writer bad_file = synthetic::build_model(options);
    bad_file.add("general.sampling.temp", -2.0f);
    const fs::path bad = temp_dir() / "tiny-sampling-bad.gguf";
    bad_file.write(bad.string());
    const CommandResult r = run_host("run --model " + shell_quote(bad.string()) + " --prompt hi --raw --json --max-tokens 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("general.sampling.temp = -2 is out of range"), std::string::npos) << r.err;
}

TEST(Cli, FlagsOverrideTheManifest) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q8_0));
    const CommandResult r = run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi --raw --json --max-tokens 2" +
                                     " --model " + shell_quote(synthetic_model(CELLM_TYPE_F16).string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_LE(j["tokens"].size(), 2u);
    EXPECT_NE(j["model"].get<std::string>().find("tiny-f16"), std::string::npos);
    // --precision reaches the backend, which checks it: scalar takes both values.
    for (const char* precision : {"exact", "fast"}) {
        const CommandResult p = run_host("run --manifest " + shell_quote(manifest.string()) +
                                         " --prompt hi --raw --json --max-tokens 1 --precision " + precision);
        EXPECT_EQ(p.exit_code, 0) << p.err;
    }
}

TEST(Cli, ChatTemplatePromptIsUsedByDefault) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q8_0));
    const CommandResult chat = run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi --json");
    const CommandResult raw = run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi --raw --json");
    ASSERT_EQ(chat.exit_code, 0) << chat.err;
    ASSERT_EQ(raw.exit_code, 0) << raw.err;
    EXPECT_GT(nlohmann::json::parse(chat.out)["prompt_tokens"].get<int>(), nlohmann::json::parse(raw.out)["prompt_tokens"].get<int>());
}

TEST(Cli, ChatKeepsTheConversationInTheCache) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q8_0));
    const CommandResult r = run_host("chat --manifest " + shell_quote(manifest.string()), "the cat\nthe dog\n/exit\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Second turn: everything the first turn computed is reused (its prompt and the reply fed back).
    const auto first = r.err.find(" reused from the cache");
    ASSERT_NE(first, std::string::npos) << r.err;
    const auto second = r.err.find(" reused from the cache", first + 1);
    ASSERT_NE(second, std::string::npos) << r.err;
    const auto number_before = [&](size_t at) {
        size_t start = r.err.rfind(", ", at);
        return std::stoi(r.err.substr(start + 2, at - start - 2));
    };
    EXPECT_EQ(number_before(first), 0);
    EXPECT_GT(number_before(second), 10);
}

TEST(Cli, BenchPrintsMediansAsJson) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q4_1));
    const CommandResult r = run_host("bench --manifest " + shell_quote(manifest.string()) +
                                     " --prompt-tokens 20 --gen-tokens 5 --repetitions 3 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    for (const char* key : {"prefill_tok_s", "decode_tok_s", "ttft_ms", "peak_rss_mb"}) EXPECT_GT(j[key].get<double>(), 0.0) << key;
    EXPECT_EQ(j["runs"].size(), 3u);
    EXPECT_LE(j["spread"]["decode_tok_s"]["min"].get<double>(), j["decode_tok_s"].get<double>());
}

const std::string three_sessions = R"([[session]]
name = "first"
prompt = "the cat"
chat = false
[[session]]
name = "second"
prompt = "a dog ran"
chat = false
max_tokens = 3
[[session]]
name = "third"
prompt = "the cat sat"
chat = false
priority = "background"
)";

TEST(Cli, RunServesEverySessionOfTheManifest) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q8_0), three_sessions, "sessions.toml");
    const CommandResult r = run_host("run --manifest " + shell_quote(manifest.string()) + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["sessions"].size(), 3u);
    std::vector<std::string> names;
    for (const auto& s : j["sessions"]) {
        names.push_back(s["name"]);
        for (const char* key : {"text", "tokens", "ttft_ms", "decode_tok_s"}) EXPECT_TRUE(s.contains(key)) << key;
        EXPECT_GT(s["ttft_ms"].get<double>(), 0.0);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"first", "second", "third"}));
    EXPECT_LE(j["sessions"][1]["generated_tokens"].get<int>(), 3);
    EXPECT_TRUE(j["kv"].contains("bytes_per_token"));

    // Each session alone gives the text it gave among the others (greedy).
    const fs::path single = manifest_for(synthetic_model(CELLM_TYPE_Q8_0));
    const CommandResult alone = run_host("run --manifest " + shell_quote(single.string()) + " --prompt 'the cat sat' --raw --json");
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    EXPECT_EQ(nlohmann::json::parse(alone.out)["tokens"], j["sessions"][2]["tokens"]);

    // Streamed: every line carries its session's name, then one summary line per session on stderr.
    const CommandResult streamed = run_host("run --manifest " + shell_quote(manifest.string()));
    ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
    std::istringstream lines(streamed.out);
    for (std::string line; std::getline(lines, line);) {
        const bool named = line.starts_with("first: ") || line.starts_with("second: ") || line.starts_with("third: ");
        EXPECT_TRUE(line.empty() || named) << "unprefixed line: " << line;
    }
    for (const char* name : {"first: prompt", "second: prompt", "third: prompt"}) {
        EXPECT_NE(streamed.err.find(name), std::string::npos) << streamed.err;
    }
}

TEST(Cli, BenchWithSessionsReportsTheAggregateAndLatencies) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q4_1));
    const CommandResult r = run_host("bench --manifest " + shell_quote(manifest.string()) +
                                     " --sessions 3 --prompt-tokens 12 --gen-tokens 6 --repetitions 1 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["sessions"], 3);
    for (const char* key : {"decode_tok_s", "alone_decode_tok_s", "late_ttft_ms", "alone_ttft_ms"}) {
        EXPECT_GT(j[key].get<double>(), 0.0) << key;
    }
    for (const char* key : {"ttft_ms", "inter_token_ms"}) {
        for (const auto& figures : {j[key], j["pooled"][key], j["runs"][0][key]}) {
            EXPECT_GT(figures["p50"].get<double>(), 0.0) << key;
            EXPECT_GE(figures["p95"].get<double>(), figures["p50"].get<double>()) << key;
        }
    }
    EXPECT_GT(j["kv"]["bytes_per_token"].get<int>(), 0);
}

TEST(CliErrors, RunWithNothingToRun) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_Q8_0));
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string())), "nothing to run");
}

TEST(CliErrors, SessionThatCanNeverFitTheKvPool) {
    // A prompt longer than what 1 MiB of KV holds for the synthetic model.
    const fs::path probe = manifest_for(synthetic_model(CELLM_TYPE_Q8_0), three_sessions, "probe.toml");
    const CommandResult sizes = run_host("run --manifest " + shell_quote(probe.string()) + " --json");
    ASSERT_EQ(sizes.exit_code, 0) << sizes.err;
    const int tokens_per_mib = (1 << 20) / nlohmann::json::parse(sizes.out)["kv"]["bytes_per_token"].get<int>();
    std::string prompt;
    for (int i = 0; i < tokens_per_mib + 64; ++i) prompt += "cat ";
    const fs::path manifest = write_file(
        "huge.toml", "[model]\npath = \"" + synthetic_model(CELLM_TYPE_Q8_0).string() +
                         "\"\n[backend]\nname = \"scalar\"\n[context]\nlength = " + std::to_string(4 * tokens_per_mib + 1024) +
                         "\nkv_memory_mib = 1\n[[session]]\nname = \"huge\"\nprompt = \"" + prompt + "\"\nchat = false\n");
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string())), "KV blocks");
}

TEST(Cli, TokenizeAndInspect) {
    const std::string model = shell_quote(synthetic_model(CELLM_TYPE_Q4_0).string());
    const CommandResult t = run_host("tokenize --model " + model + " --text 'the cat<|im_end|>' --json");
    ASSERT_EQ(t.exit_code, 0) << t.err;
    const auto ids = nlohmann::json::parse(t.out)["ids"];
    EXPECT_GT(ids.size(), 3u);  // special-token text is plain text unless --parse-special
    const CommandResult special = run_host("tokenize --model " + model + " --text '<|im_end|>' --parse-special --json");
    ASSERT_EQ(special.exit_code, 0) << special.err;
    EXPECT_EQ(nlohmann::json::parse(special.out)["ids"].size(), 1u);

    const CommandResult i = run_host("inspect " + model);
    ASSERT_EQ(i.exit_code, 0) << i.err;
    for (const char* expected : {"format:  gguf", "arch:    llama", "llama.block_count", "Q4_0", "tensors:"}) {
        EXPECT_NE(i.out.find(expected), std::string::npos) << i.out;
    }
}

TEST(CliErrors, BadCommandLine) {
    expect_one_error_line(run_host("run --prompt hi"), "--manifest");
    expect_one_error_line(run_host("fly"), "subcommand");
    expect_one_error_line(run_host("run --manifest x.toml --prompt hi --temperature -1"), "temperature");
    expect_one_error_line(run_host("run --manifest x.toml --prompt hi --precision fastest"), "--precision");
}

TEST(CliErrors, MissingModel) {
    const fs::path manifest = manifest_for(temp_dir() / "nope.gguf", "", "missing.toml");
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi"), "does not exist");
}

TEST(CliErrors, UnreadableModel) {
    const fs::path dir = temp_dir() / "a-folder.gguf";
    fs::create_directories(dir);
    const fs::path manifest = manifest_for(dir, "", "folder.toml");
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi"), "a-folder.gguf");
}

TEST(CliErrors, UnknownBackend) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_F32));
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi --backend warp"),
                          "unknown backend 'warp'");
}

TEST(CliErrors, UnknownArch) {
    const fs::path manifest = write_file("arch.toml", "[model]\npath = \"" + synthetic_model(CELLM_TYPE_F32).string() +
                                                          "\"\narch = \"mamba\"\n");
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi"), "unknown arch 'mamba'");
}

TEST(CliErrors, CorruptModel) {
    // Half of a valid file: the tensor data runs past the end.
    const fs::path good = synthetic_model(CELLM_TYPE_Q8_0);
    const fs::path bad = temp_dir() / "truncated.gguf";
    fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
    fs::resize_file(bad, fs::file_size(good) / 2);
    const fs::path manifest = manifest_for(bad, "", "corrupt.toml");
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi"), "truncated.gguf");
    expect_one_error_line(run_host("inspect " + shell_quote(bad.string())), "truncated.gguf");
}

TEST(CliErrors, NotAModel) {
    const fs::path text = write_file("notes.gguf", "just some text, not a model\n");
    expect_one_error_line(run_host("inspect " + shell_quote(text.string())), "no format plugin recognises");
}

TEST(CliErrors, MalformedManifest) {
    const fs::path syntax = write_file("syntax.toml", "[model]\npath = \"x.gguf\n");
    expect_one_error_line(run_host("run --manifest " + shell_quote(syntax.string()) + " --prompt hi"), "syntax.toml:");
    const fs::path unknown = write_file("unknown.toml", "[model]\npath = \"x.gguf\"\n[sampling]\ntemprature = 0.5\n");
    expect_one_error_line(run_host("run --manifest " + shell_quote(unknown.string()) + " --prompt hi"), "temprature");
    const fs::path type = write_file("type.toml", "[model]\npath = \"x.gguf\"\n[sampling]\ntop_k = \"many\"\n");
    expect_one_error_line(run_host("run --manifest " + shell_quote(type.string()) + " --prompt hi"), "top_k");
    expect_one_error_line(run_host("run --manifest " + shell_quote((temp_dir() / "absent.toml").string()) + " --prompt hi"),
                          "absent.toml");
}

TEST(CliErrors, WeightTypeTheBackendDoesNotSupport) {
    // The Q4_K model with one tensor relabelled Q3_K (smaller blocks, so the data still fits the file): a
    // valid GGUF whose weight type the scalar backend does not implement.
    synthetic::ModelOptions options;
    options.weight_type = CELLM_TYPE_Q4_K;
    const gguf::Writer writer = synthetic::build_model(options);
    const gguf::Layout layout = writer.layout();
    std::vector<uint8_t> bytes = writer.to_bytes();
    const auto q = std::find_if(layout.tensors.begin(), layout.tensors.end(), [&](const gguf::TensorLayout& t) {
        uint32_t type = 0;
        std::memcpy(&type, bytes.data() + t.type, sizeof(type));
        return type == CELLM_TYPE_Q4_K;
    });
    ASSERT_NE(q, layout.tensors.end());
    const uint32_t q3k = CELLM_TYPE_Q3_K;
    std::memcpy(bytes.data() + q->type, &q3k, sizeof(q3k));
    const fs::path model = temp_dir() / "q3k.gguf";
    std::ofstream(model, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const fs::path manifest = manifest_for(model, "", "q3k.toml");
    expect_one_error_line(run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt hi"),
                          "does not support weight type Q3_K");
}

TEST(CliErrors, UnknownBackendOption) {
    const fs::path manifest = manifest_for(synthetic_model(CELLM_TYPE_F32), "", "opt.toml");
    std::string text;
    {
        std::ifstream in(manifest);
        text.assign(std::istreambuf_iterator<char>(in), {});
    }
    text.replace(text.find("threads = 1"), 11, "threads = 1\nwarp_drive = true");
    const fs::path with_option = write_file("opt2.toml", text);
    expect_one_error_line(run_host("run --manifest " + shell_quote(with_option.string()) + " --prompt hi"), "warp_drive");
}

}  // namespace
}  // namespace cellm::testing
