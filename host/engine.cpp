#include "engine.h"

#include "error.h"

#include <algorithm>
#include <bit>

namespace cellm {

namespace {
constexpr size_t max_cached_graphs = 16;
}

Engine::Engine(const Model& model, Backend& backend, const EngineOptions& options)
    : model_(&model), backend_(&backend), options_(options) {
    if (options.context_length < 1 || options.context_length > (1 << 24)) {
        throw Error("context length must be between 1 and 16777216 tokens");
    }
    if (options.max_sequences < 1 || static_cast<int64_t>(options.context_length) * options.max_sequences > (1 << 28)) {
        throw Error("the KV cache would hold more than 2^28 token slots");
    }
    if (options.block_size < 1 || !std::has_single_bit(static_cast<uint32_t>(options.block_size))) {
        throw Error("KV block size must be a power of two");
    }
    weights_ = std::make_unique<WeightStore>(backend, model.file().view());
    const int32_t blocks_per_sequence = (options.context_length + options.block_size - 1) / options.block_size;
    kv_ = std::make_unique<KvCache>(backend, model.info(), blocks_per_sequence * options.max_sequences,
                                    options.block_size, options.kv_type);
    // Build the decode graph now, so a backend that cannot run this model says so before any prompt.
    graph_for(cellm_batch_shape{sizeof(cellm_batch_shape), 1, 1, 1, 1, options.block_size});
}

Engine::~Engine() = default;

int32_t Engine::create_sequence() {
    for (size_t i = 0; i < sequences_.size(); ++i) {
        if (!sequences_[i].live) {
            sequences_[i] = Sequence{true, 0, {}};
            return static_cast<int32_t>(i);
        }
    }
    sequences_.push_back(Sequence{true, 0, {}});
    return static_cast<int32_t>(sequences_.size() - 1);
}

void Engine::release_sequence(int32_t sequence) {
    Sequence& s = sequences_.at(static_cast<size_t>(sequence));
    kv_->shrink(s.pages, 0);
    s = Sequence{};
}

int32_t Engine::sequence_length(int32_t sequence) const { return sequences_.at(static_cast<size_t>(sequence)).length; }

void Engine::truncate(int32_t sequence, int32_t n) {
    Sequence& s = sequences_.at(static_cast<size_t>(sequence));
    s.length = std::clamp(n, 0, s.length);
    kv_->shrink(s.pages, s.length);
}

StepGraph& Engine::graph_for(const cellm_batch_shape& shape) {
    const auto key = std::make_tuple(shape.n_tokens, shape.n_seqs, shape.n_outputs, shape.max_blocks);
    if (auto it = graphs_.find(key); it != graphs_.end()) {
        // Least recently used goes first: keep the order of use, newest last.
        graph_order_.erase(std::find(graph_order_.begin(), graph_order_.end(), key));
        graph_order_.push_back(key);
        return *it->second;
    }
    if (graphs_.size() >= max_cached_graphs) {
        graphs_.erase(graph_order_.front());
        graph_order_.erase(graph_order_.begin());
    }
    auto graph = std::make_unique<StepGraph>(*model_, *backend_, *weights_, *kv_, shape);
    StepGraph& ref = *graph;
    graphs_.emplace(key, std::move(graph));
    graph_order_.push_back(key);
    return ref;
}

void Engine::step(std::span<const Work> work, std::vector<float>& logits) {
    if (work.empty()) throw Error("a step needs at least one sequence");
    int32_t n_tokens = 0, n_outputs = 0, max_blocks = 1;
    for (size_t i = 0; i < work.size(); ++i) {
        const Work& w = work[i];
        if (w.sequence < 0 || static_cast<size_t>(w.sequence) >= sequences_.size() || !sequences_[static_cast<size_t>(w.sequence)].live) {
            throw Error("sequence " + std::to_string(w.sequence) + " does not exist");
        }
        for (size_t j = 0; j < i; ++j) {
            if (work[j].sequence == w.sequence) {
                throw Error("sequence " + std::to_string(w.sequence) + " appears twice in one step");
            }
        }
        const Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
        if (w.tokens.empty()) throw Error("a step item needs at least one token");
        const int32_t end = s.length + static_cast<int32_t>(w.tokens.size());
        if (end > options_.context_length) {
            throw Error("the sequence would hold " + std::to_string(end) + " tokens, more than the context length " +
                        std::to_string(options_.context_length));
        }
        for (int32_t t : w.tokens) {
            if (t < 0 || t >= n_vocab()) throw Error("token id " + std::to_string(t) + " is outside the vocabulary");
        }
        n_tokens += static_cast<int32_t>(w.tokens.size());
        n_outputs += w.logits == LogitsWanted::All ? static_cast<int32_t>(w.tokens.size()) : w.logits == LogitsWanted::Last ? 1 : 0;
        max_blocks = std::max(max_blocks, (end + options_.block_size - 1) / options_.block_size);
    }
    if (n_outputs == 0) n_outputs = 1;  // the graph always produces logits; an unwanted row is dropped below
    // Round the table width up so a growing sequence reuses the same prepared graph for a while.
    max_blocks = static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(max_blocks)));

    // Reserve KV blocks for every item first. Whatever fails from here on gives the blocks back, so a failed
    // step leaves every sequence as it was.
    auto release_reserved = [&] {
        for (const Work& w : work) {
            Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
            kv_->shrink(s.pages, s.length);
        }
    };
    for (const Work& w : work) {
        Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
        if (!kv_->reserve(s.pages, s.length + static_cast<int32_t>(w.tokens.size()))) {
            release_reserved();
            throw Error("the KV cache is full");
        }
    }
    try {
        run_step(work, n_tokens, n_outputs, max_blocks, logits);
    } catch (...) {
        release_reserved();
        throw;
    }
    for (const Work& w : work) sequences_[static_cast<size_t>(w.sequence)].length += static_cast<int32_t>(w.tokens.size());
}

void Engine::run_step(std::span<const Work> work, int32_t n_tokens, int32_t n_outputs, int32_t max_blocks,
                      std::vector<float>& logits) {

    for (auto& v : inputs_) v.clear();
    auto& tokens = inputs_[CELLM_INPUT_TOKENS];
    auto& positions = inputs_[CELLM_INPUT_POSITIONS];
    auto& token_seq = inputs_[CELLM_INPUT_TOKEN_SEQ];
    auto& slots = inputs_[CELLM_INPUT_SLOTS];
    auto& table = inputs_[CELLM_INPUT_BLOCK_TABLE];
    auto& rows = inputs_[CELLM_INPUT_OUTPUT_ROWS];
    table.assign(static_cast<size_t>(max_blocks) * work.size(), -1);
    for (size_t r = 0; r < work.size(); ++r) {
        const Work& w = work[r];
        const Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
        std::copy(s.pages.blocks.begin(), s.pages.blocks.end(), table.begin() + static_cast<ptrdiff_t>(r * static_cast<size_t>(max_blocks)));
        for (size_t i = 0; i < w.tokens.size(); ++i) {
            const int32_t pos = s.length + static_cast<int32_t>(i);
            if (w.logits == LogitsWanted::All || (w.logits == LogitsWanted::Last && i + 1 == w.tokens.size())) {
                rows.push_back(static_cast<int32_t>(tokens.size()));
            }
            tokens.push_back(w.tokens[i]);
            positions.push_back(pos);
            token_seq.push_back(static_cast<int32_t>(r));
            slots.push_back(s.pages.slot(pos, options_.block_size));
        }
    }
    const bool dropped_row = rows.empty();
    if (dropped_row) rows.push_back(n_tokens - 1);

    const cellm_batch_shape shape{sizeof(cellm_batch_shape), n_tokens, static_cast<int32_t>(work.size()), n_outputs,
                                  max_blocks, options_.block_size};
    StepGraph& graph = graph_for(shape);
    logits.resize(static_cast<size_t>(n_outputs) * static_cast<size_t>(n_vocab()));
    graph.execute(inputs_, logits.data(), logits.size());
    if (dropped_row) logits.clear();
}

}  // namespace cellm
