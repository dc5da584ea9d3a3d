// roberta: the RoBERTa encoder with a sequence-classification head, as Hugging Face's
// RobertaForSequenceClassification computes it (post-LayerNorm layers, exact GELU, learned
// positions numbered from pad_id + 1 over real tokens, head on the first token's state).
// Blocks: "embeddings" (token ids [B, T] -> [B, T, H]), "layer0".."layer{L-1}" ([B, T, H]
// each, reading the batch's attention mask from batch_context.h), "classifier" (-> [B, C]).
// Submodules carry Hugging Face's names below the block (attention.self.query, ...), so
// roberta_weight_name() maps a parameter to its checkpoint name by its block alone.
#include <torch/torch.h>

#include <cmath>

#include "dtrain/models/batch_context.h"
#include "dtrain/models/registry.h"
#include "dtrain/models/roberta.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

// A named level of the parameter tree with nothing of its own (Hugging Face's
// "attention", "self", "output" ...).
std::shared_ptr<nn::Module> level(nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<nn::Module>());
}

nn::Linear linear(nn::Module& parent, const std::string& name, int64_t in, int64_t out) {
  return parent.register_module(name, nn::Linear(in, out));
}

nn::LayerNorm layer_norm(nn::Module& parent, const TransformerConfig& t) {
  return parent.register_module(
      "LayerNorm", nn::LayerNorm(nn::LayerNormOptions({t.hidden}).eps(t.layer_norm_eps)));
}

struct RobertaEmbeddingsImpl : nn::Module {
  explicit RobertaEmbeddingsImpl(const TransformerConfig& t) : pad_id(t.pad_id) {
    words = register_module(
        "word_embeddings",
        nn::Embedding(nn::EmbeddingOptions(t.vocab, t.hidden).padding_idx(t.pad_id)));
    positions = register_module(
        "position_embeddings",
        nn::Embedding(nn::EmbeddingOptions(t.max_positions, t.hidden).padding_idx(t.pad_id)));
    token_types = register_module("token_type_embeddings", nn::Embedding(1, t.hidden));
    norm = layer_norm(*this, t);
    dropout = register_module("dropout", nn::Dropout(t.dropout));
  }

  torch::Tensor forward(const torch::Tensor& ids) {
    TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == torch::kLong,
                "roberta takes token ids [batch, sequence] as int64, got ", ids.sizes(), " ",
                ids.scalar_type());
    const int64_t vocab = words->weight.size(0);
    if (ids.numel() > 0) {  // one pass for both bounds: this runs on every forward
      const auto [low, high] = at::aminmax(ids);
      TORCH_CHECK(low.item<int64_t>() >= 0 && high.item<int64_t>() < vocab,
                  "token id outside the vocabulary of ", vocab);
    }
    TORCH_CHECK(ids.size(1) + pad_id < positions->weight.size(0), "sequence of ", ids.size(1),
                " tokens exceeds the ", positions->weight.size(0) - pad_id - 1, " positions");
    const torch::Tensor real = ids.ne(pad_id).to(torch::kLong);
    const torch::Tensor position_ids = real.cumsum(1) * real + pad_id;
    const torch::Tensor x =
        words->forward(ids) + positions->forward(position_ids) + token_types->weight[0];
    return dropout->forward(norm->forward(x));
  }

  int64_t pad_id;
  nn::Embedding words{nullptr}, positions{nullptr}, token_types{nullptr};
  nn::LayerNorm norm{nullptr};
  nn::Dropout dropout{nullptr};
};
TORCH_MODULE(RobertaEmbeddings);

struct RobertaLayerImpl : nn::Module {
  explicit RobertaLayerImpl(const TransformerConfig& t) : heads(t.heads), dropout_p(t.dropout) {
    auto attention = level(*this, "attention");
    auto self = level(*attention, "self");
    query = linear(*self, "query", t.hidden, t.hidden);
    key = linear(*self, "key", t.hidden, t.hidden);
    value = linear(*self, "value", t.hidden, t.hidden);
    auto attention_output = level(*attention, "output");
    attention_dense = linear(*attention_output, "dense", t.hidden, t.hidden);
    attention_norm = layer_norm(*attention_output, t);
    intermediate = linear(*level(*this, "intermediate"), "dense", t.hidden, t.ffn);
    auto output = level(*this, "output");
    output_dense = linear(*output, "dense", t.ffn, t.hidden);
    output_norm = layer_norm(*output, t);
  }

  // [B, T, H] -> [B, heads, T, H / heads]
  torch::Tensor split_heads(const torch::Tensor& x) const {
    return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const double p = is_training() ? dropout_p : 0.0;
    const torch::Tensor& mask = current_attention_mask();
    std::optional<torch::Tensor> keys_allowed;
    if (mask.defined()) {
      TORCH_CHECK(mask.dim() == 2 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1),
                  "attention mask ", mask.sizes(), " does not match the batch ", x.sizes());
      keys_allowed = mask.ne(0).view({x.size(0), 1, 1, x.size(1)}).to(x.device());
    }
    const torch::Tensor context = at::scaled_dot_product_attention(
        split_heads(query->forward(x)), split_heads(key->forward(x)),
        split_heads(value->forward(x)), keys_allowed, p);
    const torch::Tensor merged = context.transpose(1, 2).reshape(x.sizes());
    const torch::Tensor attended = attention_norm->forward(
        torch::dropout(attention_dense->forward(merged), p, is_training()) + x);
    const torch::Tensor inner = torch::gelu(intermediate->forward(attended));
    return output_norm->forward(torch::dropout(output_dense->forward(inner), p, is_training()) +
                                attended);
  }

  int64_t heads;
  double dropout_p;
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, attention_dense{nullptr},
      intermediate{nullptr}, output_dense{nullptr};
  nn::LayerNorm attention_norm{nullptr}, output_norm{nullptr};
};
TORCH_MODULE(RobertaLayer);

struct RobertaClassifierImpl : nn::Module {
  RobertaClassifierImpl(const TransformerConfig& t, int64_t classes) : dropout_p(t.dropout) {
    dense = linear(*this, "dense", t.hidden, t.hidden);
    out_proj = linear(*this, "out_proj", t.hidden, classes);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor first = x.select(1, 0);  // the <s> token's state
    const torch::Tensor h =
        torch::tanh(dense->forward(torch::dropout(first, dropout_p, is_training())));
    return out_proj->forward(torch::dropout(h, dropout_p, is_training()));
  }

  double dropout_p;
  nn::Linear dense{nullptr}, out_proj{nullptr};
};
TORCH_MODULE(RobertaClassifier);

// Hugging Face's _init_weights: N(0, 0.02) weights, zero biases, unit LayerNorms, and the
// padding rows of the embeddings zero.
void init_like_huggingface(nn::Module& model, int64_t pad_id) {
  torch::NoGradGuard no_grad;
  for (auto& m : model.modules(false)) {
    if (auto* l = m->as<nn::Linear>()) {
      l->weight.normal_(0, 0.02);
      l->bias.zero_();
    } else if (auto* e = m->as<nn::Embedding>()) {
      e->weight.normal_(0, 0.02);
      if (e->options.padding_idx()) e->weight[pad_id].zero_();
    } else if (auto* n = m->as<nn::LayerNorm>()) {
      n->weight.fill_(1);
      n->bias.zero_();
    }
  }
}

}  // namespace

torch::nn::Sequential make_roberta(const ModelConfig& c) {
  TransformerConfig t = c.transformer;
  if (t.ffn == 0) t.ffn = 4 * t.hidden;
  if (t.layers < 1 || t.hidden < 1 || t.heads < 1 || t.ffn < 1 || t.vocab <= t.pad_id)
    throw std::invalid_argument(
        "roberta needs positive --layers, --hidden, --heads, FFN size "
        "and a vocabulary larger than the padding index");
  if (t.hidden % t.heads != 0)
    throw std::invalid_argument("roberta: --hidden " + std::to_string(t.hidden) +
                                " is not a multiple of --heads " + std::to_string(t.heads));
  if (c.input_shape.size() != 1 || c.input_shape[0] < 1 ||
      c.input_shape[0] + t.pad_id >= t.max_positions)
    throw std::invalid_argument("roberta: the sequence length (--max-seq-len) must be 1.." +
                                std::to_string(t.max_positions - t.pad_id - 1));
  torch::nn::Sequential m;
  m->push_back("embeddings", RobertaEmbeddings(t));
  for (int64_t i = 0; i < t.layers; ++i)
    m->push_back("layer" + std::to_string(i), RobertaLayer(t));
  m->push_back("classifier", RobertaClassifier(t, c.num_classes));
  init_like_huggingface(*m, t.pad_id);
  return m;
}

std::vector<std::string> roberta_weight_names(const std::string& name) {
  const auto dot = name.find('.');
  const std::string block = name.substr(0, dot), rest = name.substr(dot + 1);
  if (block == "embeddings") return {"roberta.embeddings." + rest, "embeddings." + rest};
  if (block == "classifier") return {"classifier." + rest};
  if (block.rfind("layer", 0) == 0) {
    const std::string index = block.substr(5);
    return {"roberta.encoder.layer." + index + "." + rest, "encoder.layer." + index + "." + rest};
  }
  return {name};
}

extern const ModelFamily kRobertaModel{
    "roberta",
    "RoBERTa encoder (roberta-base by default): embeddings, each layer, the classification head as "
    "blocks; reads token ids",
    make_roberta,
    ModelInput::kTokens,
    {128},
    roberta_weight_names};

}  // namespace dtrain::models
