#include "test_support.h"

#include "synthetic_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <sstream>

namespace fs = std::filesystem;

namespace cellm::testing {

fs::path source_dir() { return CELLM_SOURCE_DIR; }

fs::path models_dir() {
    if (const char* env = std::getenv("CELLM_MODELS")) return env;
    const char* home = std::getenv("HOME");
    return fs::path(home != nullptr ? home : "/root") / ".cache" / "cellm" / "models";
}

fs::path smollm2_path() { return models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"; }

bool full_suite() {
    const char* env = std::getenv("CELLM_TEST_FULL");
    return env != nullptr && std::string_view(env) == "1";
}

std::vector<float> all_logits(Stack& stack, const std::vector<int32_t>& tokens) {
    std::vector<float> logits;
    const int32_t seq = stack.engine->create_sequence();
    const Engine::Work work{seq, tokens, LogitsWanted::All};
    stack.engine->step({&work, 1}, logits);
    stack.engine->release_sequence(seq);
    return logits;
}

std::vector<int32_t> teacher_tokens(const nlohmann::json& prompt) {
    std::vector<int32_t> tokens = prompt["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = prompt["greedy_ids"].get<std::vector<int32_t>>();
    tokens.insert(tokens.end(), greedy.begin(), greedy.end());
    return tokens;
}

std::vector<float> scalar_logits(const fs::path& model, const std::vector<int32_t>& tokens, bool refresh) {
    // The file is named by the model and an FNV-1a hash of the tokens; it holds the count of floats, then them.
    uint64_t hash = 1469598103934665603ull;
    for (int32_t t : tokens) hash = (hash ^ static_cast<uint32_t>(t)) * 1099511628211ull;
    const char* dir = std::getenv("CELLM_SCALAR_LOGITS");
    fs::path file;
    if (dir != nullptr && *dir != '\0') {
        std::ostringstream name;
        name << model.filename().string() << '-' << tokens.size() << '-' << std::hex << hash << ".f32";
        file = fs::path(dir) / name.str();
    }
    std::vector<float> logits;
    if (!file.empty() && !refresh) {
        std::ifstream in(file, std::ios::binary);
        uint64_t count = 0;
        if (in.read(reinterpret_cast<char*>(&count), sizeof count) && count > 0 && count % tokens.size() == 0) {
            logits.resize(count);
            if (in.read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(count * sizeof(float))))
                return logits;
        }
        logits.clear();
    }
    EngineOptions options;
    options.context_length = 512;
    Stack scalar = make_stack(model, "scalar", options);
    logits = all_logits(scalar, tokens);
    if (!file.empty()) {
        // Written whole under another name, then renamed: a reader never sees half a file.
        fs::create_directories(file.parent_path());
        const fs::path partial = file.string() + ".partial-" + std::to_string(getpid());
        {
            std::ofstream out(partial, std::ios::binary);
            const uint64_t count = logits.size();
            out.write(reinterpret_cast<const char*>(&count), sizeof count);
            out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(count * sizeof(float)));
            if (!out) throw std::runtime_error("cannot write " + partial.string());
        }
        fs::rename(partial, file);
    }
    return logits;
}

namespace {
struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "cellm-e2e-XXXXXX").string();
        if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
}  // namespace

fs::path temp_dir() {
    static TempDir dir;
    return dir.path;
}

fs::path synthetic_model(cellm_dtype type) {
    static std::mutex mutex;
    static std::map<cellm_dtype, fs::path> written;
    std::lock_guard lock(mutex);
    if (auto it = written.find(type); it != written.end()) return it->second;
    synthetic::ModelOptions options;
    options.weight_type = type;
    const fs::path path = temp_dir() / ("tiny-" + std::string(synthetic::weight_type_name(type)) + ".gguf");
    synthetic::write_model(path.string(), options);
    written[type] = path;
    return path;
}

const PluginRegistry& registry() {
    static PluginRegistry* r = [] {
        auto* reg = new PluginRegistry();  // lives to the end of the process, like the host's
        reg->add_directory(CELLM_PLUGIN_DIR);
        return reg;
    }();
    return *r;
}

Stack make_stack(const fs::path& model, const std::string& backend, EngineOptions options, const fs::path& mmproj) {
    Stack s;
    s.model = Model::load(registry(), model, {}, {}, mmproj);
    // "name:key=value,key=value" passes options to the backend.
    const size_t colon = backend.find(':');
    const std::string name = backend.substr(0, colon);
    OptionList backend_options;
    for (size_t at = colon; at != std::string::npos && at + 1 < backend.size();) {
        const size_t end = backend.find(',', at + 1);
        const std::string pair = backend.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
        const size_t eq = pair.find('=');
        if (eq == std::string::npos) throw std::runtime_error("backend option '" + pair + "' is not key=value");
        backend_options.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
        at = end;
    }
    const Plugin* plugin = registry().find(CELLM_PLUGIN_BACKEND, name);
    if (plugin == nullptr) throw std::runtime_error("backend plugin '" + name + "' was not built");
    s.backend = std::make_unique<Backend>(*plugin, backend_options);
    s.engine = std::make_unique<Engine>(*s.model, *s.backend, options);
    return s;
}

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

CommandResult run_host(const std::string& args, const std::string& input) {
    static int counter = 0;
    const fs::path in = temp_dir() / ("in" + std::to_string(counter) + ".txt");
    std::ofstream(in) << input;
    const fs::path out = temp_dir() / ("out" + std::to_string(counter) + ".txt");
    const fs::path err = temp_dir() / ("err" + std::to_string(counter++) + ".txt");
    const std::string command = shell_quote(CELLM_HOST_BIN) + " " + args + " <" + shell_quote(in.string()) + " >" + shell_quote(out.string()) +
                                " 2>" + shell_quote(err.string());
    const int status = std::system(command.c_str());
    CommandResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    auto slurp = [](const fs::path& p) {
        std::ifstream file(p);
        std::stringstream ss;
        ss << file.rdbuf();
        return ss.str();
    };
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

double cosine(const float* a, const float* b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) {
        ab += static_cast<double>(a[i]) * b[i];
        aa += static_cast<double>(a[i]) * a[i];
        bb += static_cast<double>(b[i]) * b[i];
    }
    return ab / (std::sqrt(aa) * std::sqrt(bb) + 1e-30);
}

}  // namespace cellm::testing
