#include "sdk_engine.h"

#include "error.h"

namespace cellm::cli {

void check(cellm_result result) {
    if (result != CELLM_SUCCESS) throw Error(cellm_last_error());
}

EnginePtr open_engine(const ManifestOverrides& flags, int32_t max_sessions) {
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    if (!flags.manifest.empty()) options.manifest_path = flags.manifest.c_str();
    if (flags.kv_type) options.kv_type = flags.kv_type->c_str();
    if (flags.memory_budget) options.memory_budget_mib = *flags.memory_budget;
    if (flags.model) options.model_path = flags.model->c_str();
    if (flags.mmproj) options.mmproj_path = flags.mmproj->c_str();
    if (flags.backend) options.backend = flags.backend->c_str();
    if (flags.threads) options.threads = *flags.threads;
    if (flags.precision) options.precision = flags.precision->c_str();
    if (flags.context) options.context_length = *flags.context;
    options.max_sessions = max_sessions;
    cellm_engine* engine = nullptr;
    check(cellm_engine_open(&options, &engine));
    return EnginePtr(engine);
}

std::unique_ptr<SessionSettings> engine_session_settings(cellm_engine* engine, const ManifestOverrides& flags,
                                                         int32_t priority) {
    auto s = std::make_unique<SessionSettings>();
    cellm_session_options& o = s->options;
    o = {};
    o.struct_size = sizeof(o);
    check(cellm_session_options_init(engine, &o));
    if (flags.temperature) o.temperature = *flags.temperature;
    if (flags.seed) o.seed = *flags.seed;
    if (flags.max_tokens) o.max_tokens = *flags.max_tokens;
    o.priority = priority;
    return s;
}

std::unique_ptr<SessionSettings> session_settings(const GenerationConfig& generation, int32_t priority) {
    auto s = std::make_unique<SessionSettings>();
    cellm_session_options& o = s->options;
    o = {};
    o.struct_size = sizeof(o);
    const SamplingParams& p = generation.sampling;
    o.temperature = p.temperature;
    o.top_k = p.top_k;
    o.top_p = p.top_p;
    o.min_p = p.min_p;
    o.repeat_penalty = p.repeat_penalty;
    o.repeat_last_n = p.repeat_last_n;
    o.frequency_penalty = p.frequency_penalty;
    o.presence_penalty = p.presence_penalty;
    o.seed = p.seed;
    o.max_tokens = generation.max_tokens;
    for (const std::string& stop : generation.stop) s->stop.push_back(stop.c_str());
    o.stop = s->stop.data();
    o.n_stop = s->stop.size();
    o.priority = priority;
    return s;
}

}  // namespace cellm::cli
