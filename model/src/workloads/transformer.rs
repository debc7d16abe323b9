//! Transformer language models from Hugging Face-style configurations: BERT (`bert`, trained
//! as `BertForPreTraining` or as the class `architectures` names: masked-LM, or fine-tuned
//! for sequence or token classification or question answering, [`Head`]), GPT-2 and GPT-3
//! (`gpt2`, `GPT2LMHeadModel`), OPT (`opt`, `OPTForCausalLM`), and Llama's families (`llama`,
//! `mistral`, `qwen2`, `*ForCausalLM`: RMS norms, SwiGLU, rotary embeddings, grouped-query
//! attention, an untied head), built layer by layer as the Hugging Face modules run them,
//! with their module names (`h.0.attn.c_attn`, `encoder.layer.0.attention.self.query`,
//! `model.layers.0.self_attn.q_proj`, ...).
//!
//! A sample is one sequence of token ids, `[seq]`; activations are `[hidden, seq]`
//! (channels first, as every ridgeline tensor). Attention is the eager (unfused) form the
//! Hugging Face models run by default; position embeddings are looked up like the token
//! embeddings (the same cost); the language-model head shares the token embeddings'
//! weights (`tied`) unless the configuration unties it (Llama's families by default), and its
//! loss is softmax cross-entropy at every position. Built-in configurations are under
//! `data/catalog/transformers/`, each with its source; a user's `config.json` is read by
//! [`Config::from_json`].

use serde::Deserialize;

use super::naming::dotted;
use crate::error::{Error, Result};
use crate::graph::{Attention, ExpertActivation, Graph, LayerError, Moe, NodeId, Op, ScoreMask};

/// The families of models this module builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// BERT (post-norm encoder, masked-LM and next-sentence heads).
    Bert,
    /// GPT-2 and GPT-3 (pre-norm decoder).
    Gpt2,
    /// OPT (pre-norm decoder, ReLU).
    Opt,
    /// Llama (2 and 3): pre-norm decoder with RMS norms, a gated feed-forward (SwiGLU),
    /// rotary position embeddings, grouped-query attention and no biases.
    Llama,
    /// Mistral: Llama's layers (a sliding attention window, which costs eager attention
    /// nothing: it masks the same score matrix).
    Mistral,
    /// Qwen2: Llama's layers with biases on the query, key and value projections.
    Qwen2,
    /// Mixtral: Mistral's layers with a mixture of experts in place of the feed-forward
    /// network (`num_local_experts` SwiGLU experts, `num_experts_per_tok` a token, dropless).
    Mixtral,
}

impl Family {
    /// Whether the family builds Llama's layers.
    fn is_llama(self) -> bool {
        matches!(
            self,
            Family::Llama | Family::Mistral | Family::Qwen2 | Family::Mixtral
        )
    }
}

/// A model's configuration, with Hugging Face's field names (and their aliases across
/// families).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Config {
    /// `bert`, `gpt2`, `opt`, `llama`, `mistral`, `qwen2` or `mixtral`.
    pub model_type: String,
    /// Where the figures come from (built-in configurations).
    #[serde(default)]
    pub source: Option<String>,
    /// Vocabulary.
    pub vocab_size: usize,
    /// Hidden size (`n_embd` in GPT-2).
    #[serde(alias = "n_embd")]
    pub hidden_size: usize,
    /// Layers (`n_layer`).
    #[serde(alias = "n_layer")]
    pub num_hidden_layers: usize,
    /// Heads (`n_head`).
    #[serde(alias = "n_head")]
    pub num_attention_heads: usize,
    /// Feed-forward inner size (`n_inner`, `ffn_dim`); 4 x hidden when absent.
    #[serde(default, alias = "n_inner", alias = "ffn_dim")]
    pub intermediate_size: Option<usize>,
    /// Positions (`n_positions`).
    #[serde(alias = "n_positions")]
    pub max_position_embeddings: usize,
    /// Token types (BERT).
    #[serde(default)]
    pub type_vocab_size: Option<usize>,
    /// The activation (`activation_function`): `gelu`, `gelu_new` or `relu`.
    #[serde(default, alias = "activation_function")]
    pub hidden_act: Option<String>,
    /// GPT-2's dropouts.
    #[serde(default)]
    pub attn_pdrop: Option<f64>,
    /// GPT-2's embedding dropout.
    #[serde(default)]
    pub embd_pdrop: Option<f64>,
    /// GPT-2's residual dropout.
    #[serde(default)]
    pub resid_pdrop: Option<f64>,
    /// BERT's hidden dropout.
    #[serde(default)]
    pub hidden_dropout_prob: Option<f64>,
    /// BERT's attention dropout.
    #[serde(default)]
    pub attention_probs_dropout_prob: Option<f64>,
    /// OPT's dropout.
    #[serde(default)]
    pub dropout: Option<f64>,
    /// OPT's attention dropout.
    #[serde(default)]
    pub attention_dropout: Option<f64>,
    /// OPT: `false` for post-norm layers, which this module does not build.
    #[serde(default)]
    pub do_layer_norm_before: Option<bool>,
    /// OPT: the embeddings' width when it differs from the hidden size (not built).
    #[serde(default)]
    pub word_embed_proj_dim: Option<usize>,
    /// Whether the LM head shares the token embeddings' weights (Hugging Face's default).
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// The model class trained (Hugging Face's `architectures`, its first entry), which
    /// sets the head on the encoder or decoder ([`Head`]). Absent: BERT is trained as
    /// `BertForPreTraining`, GPT-2 as `GPT2LMHeadModel`, OPT as `OPTForCausalLM`.
    #[serde(default)]
    pub architectures: Option<Vec<String>>,
    /// Classes of a classification head (`num_labels`, or the entries of `id2label`);
    /// Hugging Face's default, 2, when absent. One is a regression (a mean squared error).
    #[serde(default)]
    pub num_labels: Option<usize>,
    /// BERT's dropout before a classification head (`classifier_dropout`); the hidden
    /// dropout when absent, as Hugging Face takes it.
    #[serde(default)]
    pub classifier_dropout: Option<f64>,
    /// A classification head's loss (`problem_type`): `regression` (mean squared error),
    /// `single_label_classification` or `multi_label_classification` (cross-entropy, the
    /// same cost); absent, a regression for one label as Hugging Face decides.
    #[serde(default)]
    pub problem_type: Option<String>,
    /// Heads of the keys and values (Llama's families: grouped-query attention); the
    /// attention heads when absent.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Channels per attention head (Llama's families); the hidden size over the heads when
    /// absent.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// The rotary embeddings' base (`rope_theta`); 10000 when absent.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Biases on the attention's projections (Llama's `attention_bias`).
    #[serde(default)]
    pub attention_bias: Option<bool>,
    /// Biases on the feed-forward projections (Llama's `mlp_bias`).
    #[serde(default)]
    pub mlp_bias: Option<bool>,
    /// Experts of each mixture-of-experts layer (Mixtral's `num_local_experts`).
    #[serde(default)]
    pub num_local_experts: Option<usize>,
    /// Experts each token goes to (Mixtral's `num_experts_per_tok`).
    #[serde(default)]
    pub num_experts_per_tok: Option<usize>,
    /// The most tokens an expert takes, as a multiple of its even share (ridgeline's own
    /// field, for a built-in or TOML configuration; Mixtral's `config.json` has none:
    /// dropless).
    #[serde(default)]
    pub capacity_factor: Option<f64>,
}

/// The head a model is trained with: what Hugging Face's model class (`architectures`)
/// puts on the encoder or decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// `BertForPreTraining`: the pooler with the next-sentence head, and the masked-LM
    /// transform with the decoder tied to the word embeddings at every position.
    PreTraining,
    /// `BertForMaskedLM` (and `BertLMHeadModel`, the same head): the masked-LM head alone,
    /// no pooler.
    MaskedLm,
    /// `BertForSequenceClassification`: the pooler, dropout and a classifier of
    /// `num_labels` outputs on the first token (fine-tuning, as on GLUE).
    SequenceClassification,
    /// `BertForTokenClassification`: dropout and a classifier at every position, no pooler.
    TokenClassification,
    /// `BertForQuestionAnswering`: start and end logits at every position (SQuAD), no
    /// pooler.
    QuestionAnswering,
    /// `GPT2LMHeadModel`, `OPTForCausalLM`: the tied language-model head at every position.
    CausalLm,
}

/// The model classes built, by family: their Hugging Face names and heads, the first the
/// family's default.
const CLASSES: &[(Family, &str, Head)] = &[
    (Family::Bert, "BertForPreTraining", Head::PreTraining),
    (Family::Bert, "BertForMaskedLM", Head::MaskedLm),
    // The same head (`BertOnlyMLMHead`, no pooler); without `is_decoder` its attention is
    // the encoder's, unmasked.
    (Family::Bert, "BertLMHeadModel", Head::MaskedLm),
    (
        Family::Bert,
        "BertForSequenceClassification",
        Head::SequenceClassification,
    ),
    (
        Family::Bert,
        "BertForTokenClassification",
        Head::TokenClassification,
    ),
    (
        Family::Bert,
        "BertForQuestionAnswering",
        Head::QuestionAnswering,
    ),
    (Family::Gpt2, "GPT2LMHeadModel", Head::CausalLm),
    (Family::Opt, "OPTForCausalLM", Head::CausalLm),
    (Family::Llama, "LlamaForCausalLM", Head::CausalLm),
    (Family::Mistral, "MistralForCausalLM", Head::CausalLm),
    (Family::Qwen2, "Qwen2ForCausalLM", Head::CausalLm),
    (Family::Mixtral, "MixtralForCausalLM", Head::CausalLm),
];

/// The model classes of `family` built, comma-separated.
fn classes(family: Family) -> String {
    CLASSES
        .iter()
        .filter(|(f, _, _)| *f == family)
        .map(|(_, name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn family(model_type: &str) -> Option<Family> {
    match model_type {
        "bert" => Some(Family::Bert),
        "gpt2" => Some(Family::Gpt2),
        "opt" => Some(Family::Opt),
        "llama" => Some(Family::Llama),
        "mistral" => Some(Family::Mistral),
        "qwen2" => Some(Family::Qwen2),
        "mixtral" => Some(Family::Mixtral),
        _ => None,
    }
}

/// The model types built, for messages.
const BUILT: &str = "bert, gpt2, opt, llama, mistral, qwen2 or mixtral";

fn unbuilt(file: &str, model_type: &str) -> Error {
    Error::invalid(
        file,
        "model_type",
        format!(
            "`{model_type}` is not a family ridgeline builds; use {BUILT}, or write the \
             layers in a workload TOML file"
        ),
    )
}

/// Where a field missing from a `config.json` comes from.
enum Default {
    /// The family's configuration class default.
    Value(serde_json::Value),
    /// Absent (ridgeline's own rule: GPT-2's `n_inner`, four times the hidden size).
    None,
    /// None: refused.
    Required,
}

/// A field of [`Config`] and the keys a family's `config.json` gives it under (the first
/// its own name).
struct Key {
    field: &'static str,
    names: &'static [&'static str],
    default: Default,
}

/// Fields another family names: Hugging Face ignores them in a `model_type`
/// configuration, so would ridgeline; the file is refused instead.
fn foreign_keys(
    map: &serde_json::Map<String, serde_json::Value>,
    keys: &[Key],
    model_type: &str,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<()> {
    for other in [Family::Bert, Family::Gpt2, Family::Opt] {
        for k in family_keys(other) {
            for name in k.names {
                let ours = keys.iter().any(|m| m.names.contains(name));
                if !ours && map.contains_key(*name) {
                    let own = keys
                        .iter()
                        .find(|m| m.field == k.field)
                        .map_or(k.field, |m| m.names[0]);
                    return Err(bad(
                        name,
                        format!(
                            "a {model_type} configuration names this field `{own}`; \
                             Hugging Face ignores `{name}` here: rename it, or remove it"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Fields that change the model in ways this module does not build: refused unless they
/// hold the built value.
fn built_values(
    map: &serde_json::Map<String, serde_json::Value>,
    fam: Family,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<()> {
    for (key, ok) in unbuilt_fields(fam) {
        // The value that is built, as JSON (`false`, `0.0`) or else text (`absolute`).
        let built: serde_json::Value =
            serde_json::from_str(ok).unwrap_or_else(|_| serde_json::json!(ok));
        let same = |v: &serde_json::Value| match (v.as_f64(), built.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => *v == built,
        };
        if let Some(v) = map.get(*key)
            && !v.is_null()
            && !same(v)
        {
            return Err(bad(
                key,
                format!(
                    "{v} is not built (only {built}); write the layers in a workload TOML file"
                ),
            ));
        }
    }
    Ok(())
}

/// `num_labels` from `id2label`, where Hugging Face wrote only the latter; the two must
/// agree where both are given.
fn labels_from_id2label(
    map: &serde_json::Map<String, serde_json::Value>,
    out: &mut serde_json::Map<String, serde_json::Value>,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<()> {
    if let Some(labels) = map.get("id2label") {
        let serde_json::Value::Object(labels) = labels else {
            return Err(bad(
                "id2label",
                format!("{labels} is not an object of class ids to names"),
            ));
        };
        match map.get("num_labels").map(serde_json::Value::as_u64) {
            None => {
                out.insert("num_labels".into(), serde_json::json!(labels.len()));
            }
            Some(Some(n)) if n != labels.len() as u64 => {
                return Err(bad(
                    "num_labels",
                    format!(
                        "{n} contradicts the {} classes of `id2label`; give one",
                        labels.len()
                    ),
                ));
            }
            // Equal, or not a count (refused as such below).
            Some(_) => {}
        }
    }
    Ok(())
}

/// The keys of `family`'s Hugging Face configuration class (`BertConfig`, `GPT2Config`
/// with its attribute map, `OPTConfig`, transformers 4.x) and the defaults ridgeline takes
/// from it.
fn family_keys(family: Family) -> Vec<Key> {
    let mut k = vec![key("vocab_size", &["vocab_size"], Default::Required)];
    match family {
        Family::Bert => bert_keys(&mut k),
        Family::Gpt2 => gpt2_keys(&mut k),
        Family::Opt => opt_keys(&mut k),
        Family::Llama | Family::Mistral | Family::Qwen2 | Family::Mixtral => {
            llama_keys(&mut k, family)
        }
    }
    k
}

/// A key: ridgeline's `field`, the `names` a file may give it, and its default.
fn key(field: &'static str, names: &'static [&'static str], default: Default) -> Key {
    Key {
        field,
        names,
        default,
    }
}

/// BERT's keys beyond the vocabulary: each field with the names Hugging Face gives it and
/// its default.
fn bert_keys(k: &mut Vec<Key>) {
    use serde_json::json;
    k.push(key("hidden_size", &["hidden_size"], Default::Required));
    k.push(key(
        "num_hidden_layers",
        &["num_hidden_layers"],
        Default::Required,
    ));
    k.push(key(
        "num_attention_heads",
        &["num_attention_heads"],
        Default::Required,
    ));
    k.push(key(
        "intermediate_size",
        &["intermediate_size"],
        Default::Value(json!(3072)),
    ));
    k.push(key(
        "max_position_embeddings",
        &["max_position_embeddings"],
        Default::Required,
    ));
    k.push(key(
        "type_vocab_size",
        &["type_vocab_size"],
        Default::Value(json!(2)),
    ));
    k.push(key(
        "hidden_act",
        &["hidden_act"],
        Default::Value(json!("gelu")),
    ));
    k.push(key(
        "hidden_dropout_prob",
        &["hidden_dropout_prob"],
        Default::None,
    ));
    k.push(key(
        "attention_probs_dropout_prob",
        &["attention_probs_dropout_prob"],
        Default::None,
    ));
}

/// GPT-2's keys beyond the vocabulary: each field with the names Hugging Face gives it and
/// its default.
fn gpt2_keys(k: &mut Vec<Key>) {
    use serde_json::json;
    k.push(key(
        "hidden_size",
        &["n_embd", "hidden_size"],
        Default::Required,
    ));
    k.push(key(
        "num_hidden_layers",
        &["n_layer", "num_hidden_layers"],
        Default::Required,
    ));
    k.push(key(
        "num_attention_heads",
        &["n_head", "num_attention_heads"],
        Default::Required,
    ));
    k.push(key("intermediate_size", &["n_inner"], Default::None));
    k.push(key(
        "max_position_embeddings",
        &["n_positions", "max_position_embeddings"],
        Default::Required,
    ));
    k.push(key(
        "hidden_act",
        &["activation_function"],
        Default::Value(json!("gelu_new")),
    ));
    k.push(key("attn_pdrop", &["attn_pdrop"], Default::None));
    k.push(key("embd_pdrop", &["embd_pdrop"], Default::None));
    k.push(key("resid_pdrop", &["resid_pdrop"], Default::None));
}

/// OPT's keys beyond the vocabulary: each field with the names Hugging Face gives it and
/// its default.
fn opt_keys(k: &mut Vec<Key>) {
    use serde_json::json;
    k.push(key("hidden_size", &["hidden_size"], Default::Required));
    k.push(key(
        "num_hidden_layers",
        &["num_hidden_layers"],
        Default::Required,
    ));
    k.push(key(
        "num_attention_heads",
        &["num_attention_heads"],
        Default::Required,
    ));
    k.push(key(
        "intermediate_size",
        &["ffn_dim"],
        Default::Value(json!(3072)),
    ));
    k.push(key(
        "max_position_embeddings",
        &["max_position_embeddings"],
        Default::Required,
    ));
    k.push(key(
        "hidden_act",
        &["activation_function"],
        Default::Value(json!("relu")),
    ));
    k.push(key("dropout", &["dropout"], Default::None));
    k.push(key(
        "attention_dropout",
        &["attention_dropout"],
        Default::None,
    ));
    k.push(key(
        "do_layer_norm_before",
        &["do_layer_norm_before"],
        Default::None,
    ));
    k.push(key(
        "word_embed_proj_dim",
        &["word_embed_proj_dim"],
        Default::None,
    ));
}

/// Llama's, Mistral's, Qwen2's and Mixtral's keys beyond the vocabulary: each field with
/// the names Hugging Face gives it and its default.
fn llama_keys(k: &mut Vec<Key>, family: Family) {
    use serde_json::json;
    // Llama's classes name each field as ridgeline does; the biases are Llama's.
    static REQUIRED: [&str; 5] = [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
    ];
    static OPTIONAL: [&str; 6] = [
        "num_key_value_heads",
        "head_dim",
        "rope_theta",
        "attention_dropout",
        "attention_bias",
        "mlp_bias",
    ];
    for field in &REQUIRED {
        k.push(key(field, std::slice::from_ref(field), Default::Required));
    }
    k.push(key(
        "hidden_act",
        &["hidden_act"],
        Default::Value(json!("silu")),
    ));
    let optional = if family == Family::Llama {
        &OPTIONAL[..]
    } else {
        &OPTIONAL[..4]
    };
    for field in optional {
        k.push(key(field, std::slice::from_ref(field), Default::None));
    }
    if family == Family::Mixtral {
        // `MixtralConfig`'s defaults (transformers 4.46).
        k.push(key(
            "num_local_experts",
            &["num_local_experts"],
            Default::Value(json!(8)),
        ));
        k.push(key(
            "num_experts_per_tok",
            &["num_experts_per_tok"],
            Default::Value(json!(2)),
        ));
    }
}

/// Fields every family's file may give, read as they are.
const PASSED: &[&str] = &[
    "tie_word_embeddings",
    "architectures",
    "num_labels",
    "classifier_dropout",
    "problem_type",
];

/// Fields of `family` that change the model in ways not built, and the value that does not.
fn unbuilt_fields(family: Family) -> &'static [(&'static str, &'static str)] {
    match family {
        Family::Bert => &[
            ("position_embedding_type", "absolute"),
            ("is_decoder", "false"),
            ("add_cross_attention", "false"),
        ],
        Family::Gpt2 => &[("add_cross_attention", "false")],
        Family::Opt => &[
            ("enable_bias", "true"),
            ("layer_norm_elementwise_affine", "true"),
        ],
        Family::Llama | Family::Mistral | Family::Qwen2 => &[],
        // The router's auxiliary loss is computed only where the logits are output, and
        // jitter noise is a training option ridgeline does not model.
        Family::Mixtral => &[
            ("output_router_logits", "false"),
            ("router_jitter_noise", "0.0"),
        ],
    }
}

/// The most parameters a configuration may describe (a hundred trillion; the largest
/// trained models have about two).
const MAX_PARAMS: f64 = 1e14;

/// Largest vocabulary, hidden size, layer count or sequence a configuration may give.
const MAX_DIM: usize = 1 << 22;

impl Config {
    /// A built-in configuration's TOML text; `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Config> {
        let c: Config = toml::from_str(text).map_err(|e| Error::Parse {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        c.check(file)?;
        Ok(c)
    }

    /// A Hugging Face `config.json`; `file` names it in errors.
    ///
    /// Each family's fields are read under the names its Hugging Face configuration class
    /// takes; a field another family names (`n_inner` in a BERT file)
    /// is refused, as are fields that change the model in ways not built (BERT's relative
    /// positions, cross-attention, OPT without biases). A missing feed-forward size, token
    /// type count or activation takes the class's default, as Hugging Face does (BERT's and
    /// OPT's feed-forward 3072, GPT-2's four times the hidden size); a missing size the
    /// model cannot do without is refused, naming the family's key.
    pub fn from_json(text: &str, file: &str) -> Result<Config> {
        let parse = |e: serde_json::Error| Error::Parse {
            file: file.to_owned(),
            message: e.to_string(),
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(parse)?;
        let serde_json::Value::Object(map) = value else {
            return Err(Error::invalid(
                file,
                "model_type",
                "a config.json is a JSON object with a `model_type`".to_owned(),
            ));
        };
        let model_type = match map.get("model_type") {
            Some(serde_json::Value::String(t)) => t.clone(),
            Some(other) => {
                return Err(Error::invalid(
                    file,
                    "model_type",
                    format!("{other} is not text; give {BUILT}"),
                ));
            }
            None => {
                return Err(Error::invalid(
                    file,
                    "model_type",
                    format!("missing; give {BUILT}"),
                ));
            }
        };
        let Some(fam) = family(&model_type) else {
            return Err(unbuilt(file, &model_type));
        };
        let keys = family_keys(fam);
        let bad = |key: &str, message: String| Error::invalid(file, key, message);
        foreign_keys(&map, &keys, &model_type, &bad)?;
        built_values(&map, fam, &bad)?;
        let mut out = serde_json::Map::new();
        out.insert(
            "model_type".into(),
            serde_json::Value::String(model_type.clone()),
        );
        let mut named: Vec<(&'static str, &'static str)> = Vec::new();
        for k in &keys {
            let given: Vec<&&str> = k.names.iter().filter(|n| map.contains_key(**n)).collect();
            if let [a, b, ..] = given.as_slice()
                && map[**a] != map[**b]
            {
                return Err(bad(
                    a,
                    format!(
                        "{} contradicts `{b}` = {}: they name the same field; give one",
                        map[**a], map[**b]
                    ),
                ));
            }
            let value = match given.first() {
                Some(n) => {
                    named.push((k.field, n));
                    map[**n].clone()
                }
                None => match &k.default {
                    Default::Value(v) => v.clone(),
                    Default::None => serde_json::Value::Null,
                    Default::Required => {
                        return Err(bad(
                            k.names[0],
                            format!("missing: a {model_type} configuration gives it"),
                        ));
                    }
                },
            };
            out.insert(k.field.into(), value);
        }
        for key in PASSED {
            if let Some(v) = map.get(*key) {
                out.insert((*key).into(), v.clone());
            }
        }
        labels_from_id2label(&map, &mut out, &bad)?;
        let name = |field: &str| {
            named
                .iter()
                .find(|(f, _)| *f == field)
                .map(|(_, n)| *n)
                .or_else(|| keys.iter().find(|k| k.field == field).map(|k| k.names[0]))
                .unwrap_or(field)
                .to_owned()
        };
        let c: Config = serde_json::from_value(serde_json::Value::Object(out)).map_err(|e| {
            // serde names the field by ridgeline's name: give the file's.
            let mut m = e.to_string();
            for k in &keys {
                m = m.replace(&format!("`{}`", k.field), &format!("`{}`", name(k.field)));
            }
            Error::Parse {
                file: file.to_owned(),
                message: m,
            }
        })?;
        c.check_named(file, &name)?;
        Ok(c)
    }

    /// The family of `model_type`.
    pub fn family(&self) -> Option<Family> {
        family(&self.model_type)
    }

    /// The head the model is trained with: its class's (`architectures`), or the family's
    /// default; `None` for a class or family not built (refused by the checks).
    pub fn head(&self) -> Option<Head> {
        let family = self.family()?;
        let mut built = CLASSES.iter().filter(|(f, _, _)| *f == family);
        match self.architectures.as_deref() {
            None => built.next().map(|(_, _, h)| *h),
            Some([first, ..]) => built.find(|(_, n, _)| n == first).map(|(_, _, h)| *h),
            Some([]) => None,
        }
    }

    /// The classes of a classification head (Hugging Face's default, 2).
    pub fn labels(&self) -> usize {
        self.num_labels.unwrap_or(2)
    }

    /// Whether a classification head is trained as a regression: `problem_type`
    /// `regression`, or one label where the file names no problem type (Hugging Face's
    /// rule).
    pub fn is_regression(&self) -> bool {
        match self.problem_type.as_deref() {
            Some(t) => t == "regression",
            None => self.labels() == 1,
        }
    }

    fn check(&self, file: &str) -> Result<()> {
        self.check_named(file, &|f: &str| f.to_owned())
    }

    /// [`Config::check`], naming each field by `name` (the key the file gave it under).
    fn check_named(&self, file: &str, name: &dyn Fn(&str) -> String) -> Result<()> {
        let bad = |field: &str, message: String| Err(Error::invalid(file, name(field), message));
        if self.family().is_none() {
            return Err(unbuilt(file, &self.model_type));
        }
        self.check_sizes(&bad)?;
        self.check_head(&bad)?;
        self.check_kv_heads(&bad)?;
        self.check_experts(&bad)?;
        self.check_heads(&bad)?;
        self.check_options(&bad)
    }

    /// The sizes, each within ridgeline's bounds, and the parameters they give.
    fn check_sizes(&self, bad: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
        for (field, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("max_position_embeddings", self.max_position_embeddings),
            ("intermediate_size", self.ffn()),
            ("type_vocab_size", self.type_vocab_size.unwrap_or(2)),
        ] {
            if v == 0 || v > MAX_DIM {
                return bad(field, format!("{v}: must be between 1 and {MAX_DIM}"));
            }
        }
        // The parameters, in floating point: a model past any trained one would overflow
        // the counts.
        let (v, h, l, f, p) = (
            self.vocab_size as f64,
            self.hidden_size as f64,
            self.num_hidden_layers as f64,
            self.ffn() as f64,
            self.max_position_embeddings as f64,
        );
        let experts = self.experts().map_or(1.0, |(e, _)| e as f64);
        let params = (v + p) * h + l * (4.0 * h * h + 3.0 * experts * h * f);
        if params > MAX_PARAMS {
            return bad(
                "num_hidden_layers",
                format!(
                    "{} layers of hidden size {} and feed-forward {}: {params:.3e} parameters, \
                     beyond any model (at most {MAX_PARAMS:e})",
                    self.num_hidden_layers,
                    self.hidden_size,
                    self.ffn()
                ),
            );
        }
        Ok(())
    }

    /// The classification head: a model class ridgeline builds, the labels and the problem
    /// type.
    fn check_head(&self, bad: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
        if self.head().is_none() {
            let given = self
                .architectures
                .as_deref()
                .and_then(<[String]>::first)
                .map_or("an empty list".to_owned(), |a| format!("`{a}`"));
            let family = self.family().map_or(String::new(), classes);
            return bad(
                "architectures",
                format!(
                    "{given} is not a {} model class ridgeline builds; give one of {family} \
                     (its first entry is the class trained), or remove it for {}",
                    self.model_type,
                    family.split(", ").next().unwrap_or_default()
                ),
            );
        }
        if let Some(n) = self.num_labels
            && (n == 0 || n > MAX_DIM)
        {
            return bad(
                "num_labels",
                format!("{n}: must be between 1 and {MAX_DIM} (1 is a regression)"),
            );
        }
        if let Some(t) = &self.problem_type
            && !matches!(
                t.as_str(),
                "regression" | "single_label_classification" | "multi_label_classification"
            )
        {
            return bad(
                "problem_type",
                format!(
                    "`{t}` is not one of Hugging Face's: regression, \
                     single_label_classification or multi_label_classification"
                ),
            );
        }
        Ok(())
    }

    /// The key and value heads: each serves an equal group of the attention heads.
    fn check_kv_heads(&self, bad: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
        if let Some(kv) = self.num_key_value_heads
            && (kv == 0 || !self.num_attention_heads.is_multiple_of(kv))
        {
            return bad(
                "num_key_value_heads",
                format!(
                    "{kv} does not divide the {} attention heads: each key and value head \
                     serves an equal group of them",
                    self.num_attention_heads
                ),
            );
        }
        Ok(())
    }

    /// A mixture of experts: the experts, the experts per token and the capacity factor.
    fn check_experts(&self, bad: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
        if let Some((experts, top_k)) = self.experts() {
            if experts == 0 || experts > MAX_DIM {
                return bad(
                    "num_local_experts",
                    format!("{experts}: must be between 1 and {MAX_DIM}"),
                );
            }
            if top_k == 0 || top_k > experts {
                return bad(
                    "num_experts_per_tok",
                    format!("{top_k}: must be between 1 and the {experts} experts"),
                );
            }
        }
        if let Some(cf) = self.capacity_factor {
            let experts = self.experts().map_or(0, |(e, _)| e);
            if experts == 0 {
                return bad(
                    "capacity_factor",
                    format!(
                        "{cf}: a capacity applies to a mixture of experts, and {} has none; \
                         remove it",
                        self.model_type
                    ),
                );
            }
            if !(cf.is_finite() && cf > 0.0 && cf <= experts as f64) {
                return bad(
                    "capacity_factor",
                    format!(
                        "{cf}: must be above 0 and at most the {experts} experts; remove it \
                         for dropless routing"
                    ),
                );
            }
        }
        Ok(())
    }

    /// The head size, the rotary base, and heads that divide the hidden size.
    fn check_heads(&self, bad: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
        if let Some(d) = self.head_dim
            && (d == 0 || !d.is_multiple_of(2) || d > MAX_DIM)
        {
            return bad(
                "head_dim",
                format!("{d}: must be an even size between 2 and {MAX_DIM} (rotary pairs)"),
            );
        }
        if let Some(t) = self.rope_theta
            && !(t.is_finite() && t > 1.0)
        {
            return bad("rope_theta", format!("{t}: must be a finite base above 1"));
        }
        if self.family().is_some_and(Family::is_llama)
            && self.head_dim.is_none()
            && !(self.hidden_size / self.num_attention_heads.max(1)).is_multiple_of(2)
        {
            return bad(
                "num_attention_heads",
                format!(
                    "{} heads of the hidden size {} have an odd size: rotary embeddings \
                     rotate channel pairs",
                    self.num_attention_heads, self.hidden_size
                ),
            );
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return bad(
                "num_attention_heads",
                format!(
                    "{} heads do not divide the hidden size {}",
                    self.num_attention_heads, self.hidden_size
                ),
            );
        }
        Ok(())
    }

    /// The activation, the norm's place, the embeddings' projection and the dropouts.
    fn check_options(&self, bad: &dyn Fn(&str, String) -> Result<()>) -> Result<()> {
        if let Some(act) = &self.hidden_act
            && !matches!(
                act.as_str(),
                "gelu" | "gelu_new" | "gelu_pytorch_tanh" | "relu" | "silu"
            )
        {
            return bad(
                "hidden_act",
                format!("`{act}` is not built; use gelu, gelu_new, relu or silu"),
            );
        }
        if self.do_layer_norm_before == Some(false) {
            return bad(
                "do_layer_norm_before",
                "post-norm OPT models are not built; only `true`".into(),
            );
        }
        if let Some(p) = self.word_embed_proj_dim
            && p != self.hidden_size
        {
            return bad(
                "word_embed_proj_dim",
                format!(
                    "{p} differs from the hidden size {}: the projections it implies are not \
                     built",
                    self.hidden_size
                ),
            );
        }
        for (field, p) in [
            ("attn_pdrop", self.attn_pdrop),
            ("embd_pdrop", self.embd_pdrop),
            ("resid_pdrop", self.resid_pdrop),
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            (
                "attention_probs_dropout_prob",
                self.attention_probs_dropout_prob,
            ),
            ("dropout", self.dropout),
            ("attention_dropout", self.attention_dropout),
            ("classifier_dropout", self.classifier_dropout),
        ] {
            if let Some(p) = p
                && !(0.0..1.0).contains(&p)
            {
                return bad(field, format!("{p}: must be in [0, 1)"));
            }
        }
        Ok(())
    }

    /// Channels per attention head.
    pub fn head_size(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Heads of the keys and values.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Whether the language-model head shares the token embeddings' weights: Hugging
    /// Face's default for BERT, GPT-2 and OPT, not for Llama's families.
    pub fn tied(&self) -> bool {
        self.tie_word_embeddings
            .unwrap_or(!self.family().is_some_and(Family::is_llama))
    }

    /// Biases of the query, key and value projections, and of the output projection
    /// (Llama's families: Qwen2 has the first, Llama both where `attention_bias`).
    fn attention_biases(&self) -> (bool, bool) {
        match self.family() {
            Some(Family::Qwen2) => (true, false),
            Some(Family::Llama) => {
                let b = self.attention_bias.unwrap_or(false);
                (b, b)
            }
            Some(Family::Mistral | Family::Mixtral) => (false, false),
            _ => (true, true),
        }
    }

    /// Experts of each mixture-of-experts layer and experts a token goes to (Mixtral);
    /// `None` for a dense model.
    pub fn experts(&self) -> Option<(usize, usize)> {
        (self.family() == Some(Family::Mixtral)).then(|| {
            (
                self.num_local_experts.unwrap_or(8),
                self.num_experts_per_tok.unwrap_or(2),
            )
        })
    }

    /// The feed-forward inner size.
    pub fn ffn(&self) -> usize {
        self.intermediate_size
            .unwrap_or(self.hidden_size.saturating_mul(4))
    }

    /// Trainable parameters of the model as Hugging Face counts them.
    pub fn params(&self) -> u64 {
        let (v, h, l, f, p) = (
            self.vocab_size as u64,
            self.hidden_size as u64,
            self.num_hidden_layers as u64,
            self.ffn() as u64,
            self.max_position_embeddings as u64,
        );
        // q, k, v and the output projection; the feed-forward; with biases.
        let attention = 4 * (h * h + h);
        let mlp = h * f + f + f * h + h;
        match self.family() {
            Some(Family::Bert) => {
                let t = self.type_vocab_size.unwrap_or(2) as u64;
                let n = self.labels() as u64;
                let embeddings = v * h + p * h + t * h + 2 * h;
                let layer = attention + mlp + 4 * h;
                let pooler = h * h + h;
                // The masked-LM transform and its norm, and the tied decoder's bias.
                let masked_lm = (h * h + h) + 2 * h + v;
                let heads = match self.head() {
                    Some(Head::MaskedLm) => masked_lm,
                    Some(Head::SequenceClassification) => pooler + h * n + n,
                    Some(Head::TokenClassification) => h * n + n,
                    Some(Head::QuestionAnswering) => 2 * h + 2,
                    // The pooler and the next-sentence head, and the masked-LM head.
                    _ => pooler + (2 * h + 2) + masked_lm,
                };
                embeddings + l * layer + heads
            }
            Some(Family::Gpt2) => v * h + p * h + l * (attention + mlp + 4 * h) + 2 * h,
            Some(Family::Opt) => v * h + (p + 2) * h + l * (attention + mlp + 4 * h) + 2 * h,
            Some(Family::Llama | Family::Mistral | Family::Qwen2 | Family::Mixtral) => {
                let q = (self.num_attention_heads * self.head_size()) as u64;
                let kv = (self.kv_heads() * self.head_size()) as u64;
                let (qkv_bias, o_bias) = self.attention_biases();
                let attention = h * q
                    + 2 * h * kv
                    + q * h
                    + u64::from(qkv_bias) * (q + 2 * kv)
                    + u64::from(o_bias) * h;
                // Gate, up and down projections; Mixtral's in each expert, with its router.
                let mlp = match self.experts() {
                    Some((e, _)) => e as u64 * 3 * h * f + h * e as u64,
                    None => 3 * h * f + u64::from(self.mlp_bias.unwrap_or(false)) * (2 * f + h),
                };
                let head = if self.tied() { 0 } else { v * h };
                v * h + l * (attention + mlp + 2 * h) + h + head
            }
            None => 0,
        }
    }
}

/// Builds `config` for sequences of `seq` tokens, hidden sizes scaled by `width` (rounded
/// to a multiple of the heads).
pub fn build(name: &str, config: &Config, seq: usize, width: f64) -> Result<Graph, LayerError> {
    build_split(name, config, seq, width, 1)
}

/// Which transformer layer a graph layer belongs to, by its name (`h.3.`, `encoder.layer.3.`,
/// `model.decoder.layers.3.`, as the builders here name them); `None` for the embeddings, the
/// head, and every layer of a graph that is no transformer.
pub fn block_of(name: &str) -> Option<usize> {
    for prefix in [
        "h.",
        "encoder.layer.",
        "model.decoder.layers.",
        "model.layers.",
    ] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return rest.split('.').next()?.parse().ok();
        }
    }
    None
}

/// The graph one of `tensor` tensor-parallel ranks runs (Megatron-LM's split, Shoeybi et al.
/// 2019, section 3): the query, key and value projections and the first feed-forward layer
/// split by columns (`1 / tensor` of their outputs each), the attention by heads, the
/// output projection and the second feed-forward layer by rows (their full output from a
/// `1 / tensor` share of the input, summed over the ranks by an allreduce the graph does not
/// hold); the token embeddings and the tied head split by vocabulary; norms, dropout,
/// residuals, position embeddings and BERT's pooler and masked-LM transform whole on every
/// rank. `tensor = 1` is [`build`].
pub fn build_split(
    name: &str,
    config: &Config,
    seq: usize,
    width: f64,
    tensor: usize,
) -> Result<Graph, LayerError> {
    build_parallel(name, config, seq, width, tensor, 1)
}

/// [`build_split`] with the experts of a mixture-of-experts model split over `expert`
/// expert-parallel ranks (each holds `1 / expert` of every layer's experts; the tokens'
/// all-to-all exchange is not in the graph). Tensor parallelism splits each expert's
/// feed-forward size as it splits a dense one (Megatron-Core's expert tensor parallelism
/// at the tensor-parallel degree), and the router is whole on every rank.
pub fn build_parallel(
    name: &str,
    config: &Config,
    seq: usize,
    width: f64,
    tensor: usize,
    expert: usize,
) -> Result<Graph, LayerError> {
    let family = config.family().ok_or_else(|| LayerError {
        layer: "input".into(),
        message: format!("model_type `{}` is not built", config.model_type),
    })?;
    let heads = config.num_attention_heads;
    let kv_heads = config.kv_heads();
    let t = tensor.max(1);
    if !heads.is_multiple_of(t) || !config.ffn().is_multiple_of(t) {
        return Err(LayerError {
            layer: "input".into(),
            message: format!(
                "a tensor-parallel split of {t} must divide the {heads} heads and the \
                 feed-forward size {}",
                config.ffn()
            ),
        });
    }
    if !kv_heads.is_multiple_of(t) {
        return Err(LayerError {
            layer: "input".into(),
            message: format!(
                "a tensor-parallel split of {t} must divide the {kv_heads} key and value \
                 heads (Megatron-LM splits them as the query heads)"
            ),
        });
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let scale =
        |v: usize, unit: usize| (((v as f64 * width) / unit as f64).round() as usize).max(1) * unit;
    let hidden = scale(config.hidden_size, heads);
    // Channels per head: the configuration's, or the scaled hidden size's share.
    #[allow(clippy::float_cmp)]
    let head = if width == 1.0 {
        config.head_size()
    } else {
        hidden / heads
    };
    let m = Dims {
        vocab: config.vocab_size.div_ceil(t),
        hidden,
        shard: hidden / t,
        ffn: scale(config.ffn(), t) / t,
        heads: heads / t,
        kv_heads: kv_heads / t,
        head,
        positions: config.max_position_embeddings,
    };
    let expert = expert.max(1);
    match config.experts() {
        Some((experts, _)) if !experts.is_multiple_of(expert) => {
            return Err(LayerError {
                layer: "input".into(),
                message: format!(
                    "an expert-parallel split of {expert} must divide the {experts} experts"
                ),
            });
        }
        None if expert > 1 => {
            return Err(LayerError {
                layer: "input".into(),
                message: format!(
                    "expert parallelism ({expert}) splits a mixture of experts, and {} has \
                     none",
                    config.model_type
                ),
            });
        }
        _ => {}
    }
    let layers = config.num_hidden_layers;
    let mut g = Graph::with_capacity(name, vec![seq], 20 * layers + 20)?;
    match family {
        Family::Gpt2 => gpt2(&mut g, config, &m)?,
        Family::Opt => opt(&mut g, config, &m)?,
        Family::Llama | Family::Mistral | Family::Qwen2 | Family::Mixtral => {
            llama(&mut g, config, &m, expert)?
        }
        Family::Bert => bert(&mut g, config, &m)?,
    }
    Ok(g)
}

/// GPT-2's blocks (Hugging Face's `GPT2LMHeadModel`): embeddings, pre-norm blocks with one
/// fused query-key-value projection, the final norm and the tied head.
fn gpt2(g: &mut Graph, config: &Config, m: &Dims) -> Result<(), LayerError> {
    let layers = config.num_hidden_layers;
    let drop = |p: Option<f64>| p.unwrap_or(0.1);
    let act = Activation::of(config.hidden_act.as_deref(), Activation::GeluNew);
    let mut x = embed(g, m, &["wte", "wpe"], m.positions)?;
    x = dropout(g, "drop", x, drop(config.embd_pdrop))?;
    for i in 0..layers {
        let p = format!("h.{i}");
        let n = g.push(dotted(&p, "ln_1"), Op::LayerNorm, &[x])?;
        let qkv = g.push(dotted(&p, "attn.c_attn"), linear(3 * m.shard), &[n])?;
        let a = g.push(
            dotted(&p, "attn.attention"),
            attention(m.heads, true, drop(config.attn_pdrop)),
            &[qkv],
        )?;
        let o = g.push(dotted(&p, "attn.c_proj"), linear(m.hidden), &[a])?;
        let o = dropout(
            g,
            &dotted(&p, "attn.resid_dropout"),
            o,
            drop(config.resid_pdrop),
        )?;
        x = g.push(dotted(&p, "attn.residual"), Op::Add, &[x, o])?;
        let n = g.push(dotted(&p, "ln_2"), Op::LayerNorm, &[x])?;
        let h = g.push(dotted(&p, "mlp.c_fc"), linear(m.ffn), &[n])?;
        let h = activation(g, &dotted(&p, "mlp.act"), h, act)?;
        let h = g.push(dotted(&p, "mlp.c_proj"), linear(m.hidden), &[h])?;
        let h = dropout(g, &dotted(&p, "mlp.dropout"), h, drop(config.resid_pdrop))?;
        x = g.push(dotted(&p, "mlp.residual"), Op::Add, &[x, h])?;
    }
    let n = g.push("ln_f", Op::LayerNorm, &[x])?;
    lm_head(g, "lm_head", n, m, false, true)?;
    Ok(())
}

/// OPT's decoder (`OPTForCausalLM`): learned positions offset by 2, pre-norm blocks with OPT's
/// attention, the final norm and the tied head.
fn opt(g: &mut Graph, config: &Config, m: &Dims) -> Result<(), LayerError> {
    let layers = config.num_hidden_layers;
    let drop = config.dropout.unwrap_or(0.1);
    let attn_drop = config.attention_dropout.unwrap_or(0.0);
    let act = Activation::of(config.hidden_act.as_deref(), Activation::Relu);
    // `OPTAttention`: the queries scaled, the causal mask added, the scores clamped
    // at the type's minimum (transformers 4.38, `modeling_opt.py`).
    let opt_attention = Attention {
        mask: ScoreMask::Add,
        clamp: true,
        scale_queries: true,
        ..Attention::new(m.heads, true, attn_drop, false)
    };
    // OPT's learned positions are offset by 2: a table of positions + 2 rows.
    let mut x = embed(
        g,
        m,
        &[
            "model.decoder.embed_tokens",
            "model.decoder.embed_positions",
        ],
        m.positions + 2,
    )?;
    for i in 0..layers {
        let p = format!("model.decoder.layers.{i}");
        let n = g.push(dotted(&p, "self_attn_layer_norm"), Op::LayerNorm, &[x])?;
        let a = self_attention(g, &p, "self_attn", n, m, opt_attention)?;
        let o = g.push(dotted(&p, "self_attn.out_proj"), linear(m.hidden), &[a])?;
        let o = dropout(g, &dotted(&p, "dropout"), o, drop)?;
        x = g.push(dotted(&p, "self_attn.residual"), Op::Add, &[x, o])?;
        let n = g.push(dotted(&p, "final_layer_norm"), Op::LayerNorm, &[x])?;
        let h = g.push(dotted(&p, "fc1"), linear(m.ffn), &[n])?;
        let h = activation(g, &dotted(&p, "activation_fn"), h, act)?;
        let h = g.push(dotted(&p, "fc2"), linear(m.hidden), &[h])?;
        let h = dropout(g, &dotted(&p, "fc2.dropout"), h, drop)?;
        x = g.push(dotted(&p, "residual"), Op::Add, &[x, h])?;
    }
    let n = g.push("model.decoder.final_layer_norm", Op::LayerNorm, &[x])?;
    lm_head(g, "lm_head", n, m, false, true)?;
    Ok(())
}

/// Llama's families (Llama, Mistral, Qwen2, Mixtral): RMS-normed blocks with rotary positions,
/// grouped key and value heads, a gated feed-forward network or a mixture of experts, and the
/// head.
/// `expert`: the expert-parallel ranks a mixture of experts' experts are spread over.
fn llama(g: &mut Graph, config: &Config, m: &Dims, expert: usize) -> Result<(), LayerError> {
    let layers = config.num_hidden_layers;
    let act = Activation::of(config.hidden_act.as_deref(), Activation::Silu);
    let (qkv_bias, o_bias) = config.attention_biases();
    let mlp_bias = config.mlp_bias.unwrap_or(false);
    let theta = config.rope_theta.unwrap_or(crate::file::ROPE_THETA);
    // `LlamaAttention` in eager mode (transformers 4.46, `modeling_llama.py`): the
    // scores scaled after `QK^T`, the causal mask added, softmax, dropout.
    let llama_attention = Attention {
        kv_heads: m.kv_heads,
        mask: ScoreMask::Add,
        ..Attention::new(
            m.heads,
            true,
            config.attention_dropout.unwrap_or(0.0),
            false,
        )
    };
    let (q_out, kv_out) = (m.heads * m.head, m.kv_heads * m.head);
    let mut x = g.push("model.embed_tokens", embedding(m.vocab, m.hidden), &[0])?;
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        let a = |name: &str| dotted(&p, &format!("self_attn.{name}"));
        let n = g.push(dotted(&p, "input_layernorm"), Op::RmsNorm, &[x])?;
        let q = g.push(a("q_proj"), linear_with(q_out, qkv_bias), &[n])?;
        let k = g.push(a("k_proj"), linear_with(kv_out, qkv_bias), &[n])?;
        let v = g.push(a("v_proj"), linear_with(kv_out, qkv_bias), &[n])?;
        let rotary = |heads| Op::Rotary { heads, theta };
        let q = g.push(a("q_rotary"), rotary(m.heads), &[q])?;
        let k = g.push(a("k_rotary"), rotary(m.kv_heads), &[k])?;
        let o = g.push(a("attention"), Op::Attention(llama_attention), &[q, k, v])?;
        let o = g.push(a("o_proj"), linear_with(m.hidden, o_bias), &[o])?;
        x = g.push(a("residual"), Op::Add, &[x, o])?;
        let n = g.push(dotted(&p, "post_attention_layernorm"), Op::RmsNorm, &[x])?;
        if let Some((experts, top_k)) = config.experts() {
            // `MixtralSparseMoeBlock`: the router (`gate`) and the experts' loop.
            let moe = Moe {
                experts,
                local: experts / expert,
                top_k,
                ffn: m.ffn,
                gated: true,
                activation: match act {
                    Activation::Relu => ExpertActivation::Relu,
                    Activation::Gelu | Activation::GeluNew => ExpertActivation::Gelu,
                    Activation::Silu => ExpertActivation::Silu,
                },
                capacity_factor: config.capacity_factor,
            };
            let h = g.push(dotted(&p, "block_sparse_moe"), Op::Moe(moe), &[n])?;
            x = g.push(dotted(&p, "block_sparse_moe.residual"), Op::Add, &[x, h])?;
            continue;
        }
        let gate = g.push(
            dotted(&p, "mlp.gate_proj"),
            linear_with(m.ffn, mlp_bias),
            &[n],
        )?;
        let up = g.push(
            dotted(&p, "mlp.up_proj"),
            linear_with(m.ffn, mlp_bias),
            &[n],
        )?;
        let gate = activation(g, &dotted(&p, "mlp.act_fn"), gate, act)?;
        let h = g.push(dotted(&p, "mlp.gated"), Op::Mul, &[gate, up])?;
        let h = g.push(
            dotted(&p, "mlp.down_proj"),
            linear_with(m.hidden, mlp_bias),
            &[h],
        )?;
        x = g.push(dotted(&p, "mlp.residual"), Op::Add, &[x, h])?;
    }
    let n = g.push("model.norm", Op::RmsNorm, &[x])?;
    lm_head(g, "lm_head", n, m, false, config.tied())?;
    Ok(())
}

/// BERT's encoder (`BertForPreTraining`): word, position and token-type embeddings, post-norm
/// blocks, the pooler and the pre-training heads.
fn bert(g: &mut Graph, config: &Config, m: &Dims) -> Result<(), LayerError> {
    let layers = config.num_hidden_layers;
    let drop = config.hidden_dropout_prob.unwrap_or(0.1);
    let attn_drop = config.attention_probs_dropout_prob.unwrap_or(0.1);
    let act = Activation::of(config.hidden_act.as_deref(), Activation::Gelu);
    // `BertSelfAttention`: the scores scaled, then the padding mask added
    // (transformers 4.38, `modeling_bert.py`, eager attention).
    let bert_attention = Attention {
        mask: ScoreMask::Add,
        ..Attention::new(m.heads, false, attn_drop, false)
    };
    let types = config.type_vocab_size.unwrap_or(2);
    let words = g.push(
        "embeddings.word_embeddings",
        embedding(m.vocab, m.hidden),
        &[0],
    )?;
    let positions = g.push(
        "embeddings.position_embeddings",
        embedding(m.positions, m.hidden),
        &[0],
    )?;
    let token_types = g.push(
        "embeddings.token_type_embeddings",
        embedding(types, m.hidden),
        &[0],
    )?;
    let sum = g.push("embeddings.sum", Op::Add, &[words, positions, token_types])?;
    let n = g.push("embeddings.LayerNorm", Op::LayerNorm, &[sum])?;
    let mut x = dropout(g, "embeddings.dropout", n, drop)?;
    for i in 0..layers {
        let p = format!("encoder.layer.{i}");
        let a = self_attention(g, &p, "attention.self", x, m, bert_attention)?;
        let o = g.push(dotted(&p, "attention.output.dense"), linear(m.hidden), &[a])?;
        let o = dropout(g, &dotted(&p, "attention.output.dropout"), o, drop)?;
        let o = g.push(dotted(&p, "attention.output.residual"), Op::Add, &[o, x])?;
        let a = g.push(
            dotted(&p, "attention.output.LayerNorm"),
            Op::LayerNorm,
            &[o],
        )?;
        let h = g.push(dotted(&p, "intermediate.dense"), linear(m.ffn), &[a])?;
        let h = activation(g, &dotted(&p, "intermediate.act"), h, act)?;
        let h = g.push(dotted(&p, "output.dense"), linear(m.hidden), &[h])?;
        let h = dropout(g, &dotted(&p, "output.dropout"), h, drop)?;
        let h = g.push(dotted(&p, "output.residual"), Op::Add, &[h, a])?;
        x = g.push(dotted(&p, "output.LayerNorm"), Op::LayerNorm, &[h])?;
    }
    let pooler = |g: &mut Graph| -> Result<NodeId, LayerError> {
        let first = g.push("pooler.first_token", Op::Gather { edges: 1 }, &[x])?;
        let pooled = g.push("pooler.dense", linear(m.hidden), &[first])?;
        g.push("pooler.activation", Op::Tanh, &[pooled])
    };
    let masked_lm = |g: &mut Graph| -> Result<NodeId, LayerError> {
        let t = g.push("cls.predictions.transform.dense", linear(m.hidden), &[x])?;
        let t = activation(g, "cls.predictions.transform.act", t, act)?;
        let t = g.push("cls.predictions.transform.LayerNorm", Op::LayerNorm, &[t])?;
        lm_head(g, "cls.predictions.decoder", t, m, true, true)
    };
    let labels = config.labels();
    let loss = if config.is_regression() {
        Op::MseLoss
    } else {
        Op::SoftmaxCrossEntropy
    };
    let classifier_drop = config.classifier_dropout.unwrap_or(drop);
    match config.head() {
        Some(Head::MaskedLm) => {
            masked_lm(g)?;
        }
        Some(Head::SequenceClassification) => {
            let pooled = pooler(g)?;
            let pooled = dropout(g, "dropout", pooled, classifier_drop)?;
            g.push("classifier", linear(labels), &[pooled])?;
            g.then("loss", loss)?;
        }
        Some(Head::TokenClassification) => {
            let h = dropout(g, "dropout", x, classifier_drop)?;
            g.push("classifier", linear(labels), &[h])?;
            g.then("loss", loss)?;
        }
        Some(Head::QuestionAnswering) => {
            // Start and end logits at every position, each a softmax over the
            // positions.
            g.push("qa_outputs", linear(2), &[x])?;
            g.then("loss", Op::SoftmaxCrossEntropy)?;
        }
        _ => {
            // Next-sentence head on the first token's state; masked-LM head at
            // every position.
            let pooled = pooler(g)?;
            g.push("cls.seq_relationship", linear(2), &[pooled])?;
            g.then("nsp_loss", Op::SoftmaxCrossEntropy)?;
            masked_lm(g)?;
        }
    }
    Ok(())
}

/// The sizes a model (one tensor-parallel rank of it) is built with.
struct Dims {
    /// The rank's share of the vocabulary.
    vocab: usize,
    hidden: usize,
    /// The rank's share of the hidden channels (query, key and value projections).
    shard: usize,
    /// The rank's share of the feed-forward size.
    ffn: usize,
    /// The rank's heads.
    heads: usize,
    /// The rank's key and value heads (Llama's families).
    kv_heads: usize,
    /// Channels per head (Llama's families).
    head: usize,
    positions: usize,
}

fn linear(out_features: usize) -> Op {
    linear_with(out_features, true)
}

fn linear_with(out_features: usize, bias: bool) -> Op {
    Op::Linear {
        out_features,
        bias,
        tied: false,
    }
}

fn embedding(num_embeddings: usize, embedding_dim: usize) -> Op {
    Op::Embedding {
        num_embeddings,
        embedding_dim,
    }
}

/// A feed-forward activation, as Hugging Face's models compute it in eager PyTorch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activation {
    Relu,
    /// One GELU kernel: `gelu` (the erf form) and `gelu_pytorch_tanh` (PyTorch's fused tanh
    /// approximation).
    Gelu,
    /// SiLU (`silu`, Llama's families' gate).
    Silu,
    /// `gelu_new` (`NewGELUActivation`): the tanh approximation written out in Python,
    /// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`, which eager PyTorch runs as
    /// eight element-wise kernels forward, each saving what autograd saves (the input, the
    /// tanh's output and both factors of the last product).
    GeluNew,
}

impl Activation {
    /// The activation a configuration names (`hidden_act`, checked in
    /// [`Config::check`]), or the family's default.
    fn of(name: Option<&str>, default: Activation) -> Activation {
        match name {
            Some("relu") => Activation::Relu,
            Some("gelu" | "gelu_pytorch_tanh") => Activation::Gelu,
            Some("gelu_new") => Activation::GeluNew,
            Some("silu") => Activation::Silu,
            _ => default,
        }
    }
}

/// The activation `act` of `x`; its last layer is named `name`.
fn activation(g: &mut Graph, name: &str, x: NodeId, act: Activation) -> Result<NodeId, LayerError> {
    match act {
        Activation::Relu => g.push(name, Op::Relu, &[x]),
        Activation::Gelu => g.push(name, Op::Gelu, &[x]),
        Activation::Silu => g.push(name, Op::Silu, &[x]),
        Activation::GeluNew => {
            // Python evaluates `0.5 * x` first, then the bracket inside out.
            let half = g.push(dotted(name, "half"), Op::Scale { factor: 0.5 }, &[x])?;
            let cube = g.push(dotted(name, "cube"), Op::Pow { exponent: 3.0 }, &[x])?;
            let cube = g.push(
                dotted(name, "cube_scaled"),
                Op::Scale { factor: 0.044_715 },
                &[cube],
            )?;
            let inner = g.push(dotted(name, "inner"), Op::Add, &[x, cube])?;
            let arg = g.push(
                dotted(name, "tanh_arg"),
                Op::Scale {
                    factor: (2.0 / std::f64::consts::PI).sqrt(),
                },
                &[inner],
            )?;
            let t = g.push(dotted(name, "tanh"), Op::Tanh, &[arg])?;
            let t = g.push(dotted(name, "one_plus"), Op::Shift { offset: 1.0 }, &[t])?;
            g.push(name, Op::Mul, &[half, t])
        }
    }
}

fn attention(heads: usize, causal: bool, dropout: f64) -> Op {
    Op::Attention(Attention::new(heads, causal, dropout, false))
}

/// Dropout, unless `p` is 0.
fn dropout(g: &mut Graph, name: &str, x: NodeId, p: f64) -> Result<NodeId, LayerError> {
    if p > 0.0 {
        g.push(name, Op::Dropout { rate: p }, &[x])
    } else {
        Ok(x)
    }
}

/// Token and position embeddings of the input ids, summed.
fn embed(
    g: &mut Graph,
    m: &Dims,
    names: &[&str; 2],
    positions: usize,
) -> Result<NodeId, LayerError> {
    let tokens = g.push(names[0], embedding(m.vocab, m.hidden), &[0])?;
    let positions = g.push(names[1], embedding(positions, m.hidden), &[0])?;
    g.push("embeddings.sum", Op::Add, &[tokens, positions])
}

/// Separate query, key and value projections of `x`, and attention `a` over them.
fn self_attention(
    g: &mut Graph,
    prefix: &str,
    module: &str,
    x: NodeId,
    m: &Dims,
    a: Attention,
) -> Result<NodeId, LayerError> {
    let p = dotted(prefix, module);
    let names = if module == "attention.self" {
        ["query", "key", "value"]
    } else {
        ["q_proj", "k_proj", "v_proj"]
    };
    let q = g.push(dotted(&p, names[0]), linear(m.shard), &[x])?;
    let k = g.push(dotted(&p, names[1]), linear(m.shard), &[x])?;
    let v = g.push(dotted(&p, names[2]), linear(m.shard), &[x])?;
    g.push(dotted(&p, "attention"), Op::Attention(a), &[q, k, v])
}

/// The language-model head, its weights the token embeddings' (with an output bias of its
/// own where `bias`), and the loss at every position.
fn lm_head(
    g: &mut Graph,
    name: &str,
    x: NodeId,
    m: &Dims,
    bias: bool,
    tied: bool,
) -> Result<NodeId, LayerError> {
    g.push(
        name,
        Op::Linear {
            out_features: m.vocab,
            bias,
            tied,
        },
        &[x],
    )?;
    g.then("lm_loss", Op::SoftmaxCrossEntropy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::cost;
    use crate::precision::Precision;
    use crate::workloads::{BuildOptions, build as builtin};

    /// The Hugging Face parameter counts of the five models (`Config::params` and the
    /// graph's own count): `BertForPreTraining` 336,226,108; `GPT2LMHeadModel` 774,030,080;
    /// GPT-3 XL and 2.7B as GPT-2 1,315,723,264 and 2,651,553,280; `OPTForCausalLM`
    /// 1,315,758,080.
    #[test]
    fn parameters_are_hugging_face_s() {
        for (name, params) in [
            ("gpt2", 124_439_808),
            ("bert-large", 336_226_108),
            ("gpt2-large", 774_030_080),
            ("gpt3-xl", 1_315_723_264),
            ("gpt3-2.7b", 2_651_553_280),
            ("opt-1.3b", 1_315_758_080),
        ] {
            let g = builtin(name, &BuildOptions::default()).unwrap();
            assert_eq!(cost(&g, 1, Precision::Fp32).params, params, "{name}");
        }
    }

    /// The analytic count: `6 T (L (4 H^2 + 2 H F) + V H)` for the projections, the
    /// feed-forward and the head over `T` tokens, and BERT's masked-LM transform at every
    /// token and pooler and next-sentence head at one per sequence; `12 L S H T` for
    /// `QK^T` and `AV` (forward, and backward twice that) and `k L heads S T` for the `k`
    /// element-wise kernels over the attention weights forward and backward, one FLOP per
    /// weight each (listed below, as each model's eager attention runs them). The graph's
    /// FLOPs, vector ops included, are within 0.1 % of it; its linear layers' FLOPs equal
    /// its first term.
    #[test]
    fn training_flops_are_the_analytic_count() {
        for name in [
            "bert-large",
            "gpt2-large",
            "gpt3-xl",
            "gpt3-2.7b",
            "opt-1.3b",
        ] {
            for (seq, batch) in [(None, 1u64), (Some(128), 3)] {
                let options = BuildOptions {
                    input_size: seq.map(|s| vec![s]),
                    width: 1.0,
                };
                let g = builtin(name, &options).unwrap();
                let b = crate::workloads::find(name).unwrap();
                let c = cost(&g, batch, Precision::Fp32);
                let config = b.transformer_config().unwrap();
                let (v, h, f, l) = (
                    config.vocab_size as f64,
                    config.hidden_size as f64,
                    config.ffn() as f64,
                    config.num_hidden_layers as f64,
                );
                let s = g.input_shape().dims()[0] as f64;
                let t = s * batch as f64;
                let mut weights = 6.0 * t * (l * (4.0 * h * h + 2.0 * h * f) + v * h);
                if config.family() == Some(Family::Bert) {
                    weights += 6.0 * t * h * h + 6.0 * batch as f64 * (h * h + 2.0 * h);
                }
                // The element-wise kernels on each head's weights, forward + backward:
                // BERT scale, mask add, softmax, dropout + dropout's, softmax's, the scale's;
                // GPT-2 scale, select, softmax, dropout and each one's backward; OPT mask
                // add, clamp, softmax (no dropout) + softmax's and the clamp's five, and
                // the scale on the queries each way.
                let (ops, queries) = match config.family() {
                    Some(Family::Bert) => (4.0 + 3.0, 0.0),
                    Some(Family::Opt) => (3.0 + 6.0, 2.0 * l * h * t),
                    _ => (4.0 + 4.0, 0.0),
                };
                let heads = config.num_attention_heads as f64;
                let analytic = weights + 12.0 * l * s * h * t + ops * l * heads * s * t + queries;
                let linear = linear_flops(&c);
                assert!(
                    (linear / weights - 1.0).abs() < 1e-12,
                    "{name} {seq:?}: linear layers {linear}, analytic {weights}"
                );
                let total = c.flops_train.value();
                assert!(
                    (total / analytic - 1.0).abs() < 1e-3,
                    "{name} {seq:?}: {total} vs {analytic}"
                );
            }
        }
    }

    /// The training FLOPs of a step's linear layers.
    fn linear_flops(c: &crate::cost::GraphCost<'_>) -> f64 {
        c.layers
            .iter()
            .filter(|r| r.op == "linear")
            .map(|r| (r.flops_fwd + r.flops_bwd).value())
            .sum()
    }

    /// GPT-2's `gelu_new` is the eight layers of its Python formula, which compute the tanh
    /// form of GELU; `gelu` is one layer, and a configuration's `activation_function` picks.
    #[test]
    fn gelu_new_is_its_formula_written_out() {
        let g = builtin("gpt2", &BuildOptions::default()).unwrap();
        let act = g.find("h.0.mlp.act").unwrap();
        assert_eq!(g.layers()[act].op, Op::Mul);
        // Evaluate the layers between the first feed-forward projection and the activation
        // on scalars.
        let first = g.find("h.0.mlp.c_fc").unwrap();
        let gelu = |x: f64| {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x.powi(3))).tanh())
        };
        for x in [-2.5, -0.3, 0.0, 0.7, 3.1] {
            let mut v = vec![f64::NAN; act + 1];
            v[first] = x;
            for i in first + 1..=act {
                let l = &g.layers()[i];
                let a = |k: usize| v[l.inputs[k]];
                v[i] = match l.op {
                    Op::Scale { factor } => factor * a(0),
                    Op::Shift { offset } => offset + a(0),
                    Op::Pow { exponent } => a(0).powf(exponent),
                    Op::Tanh => a(0).tanh(),
                    Op::Add => a(0) + a(1),
                    Op::Mul => a(0) * a(1),
                    ref op => panic!("{} in gelu_new", op.kind()),
                };
            }
            assert!((v[act] - gelu(x)).abs() < 1e-12, "{x}: {}", v[act]);
        }
        assert_eq!(act - first, 8, "eight kernels forward");
        // BERT's `gelu` is one layer; OPT's `relu` too.
        let bert = builtin("bert-large", &BuildOptions::default()).unwrap();
        let i = bert.find("encoder.layer.0.intermediate.act").unwrap();
        assert_eq!(bert.layers()[i].op, Op::Gelu);
        let opt = builtin("opt-1.3b", &BuildOptions::default()).unwrap();
        let i = opt.find("model.decoder.layers.0.activation_fn").unwrap();
        assert_eq!(opt.layers()[i].op, Op::Relu);
        // Autograd saves the input, the tanh's output and both factors of the product:
        // four tensors of the feed-forward size where one GELU kernel saves one.
        let c = cost(&g, 1, Precision::Fp32);
        let saved: f64 = c.layers[first + 1..=act]
            .iter()
            .map(|r| r.activation_bytes.value())
            .sum();
        let ffn = g.layers()[first].output.elements() as f64;
        assert_eq!(saved, 4.0 * 4.0 * ffn);
    }

    #[test]
    fn sequence_length_and_width_rescale() {
        let g = builtin(
            "gpt2-large",
            &BuildOptions {
                input_size: Some(vec![256]),
                width: 0.5,
            },
        )
        .unwrap();
        assert_eq!(g.input_shape().dims(), &[256]);
        let qkv = &g.layers()[g.find("h.0.attn.c_attn").unwrap()];
        assert_eq!(qkv.output.dims(), &[3 * 640, 256]);
        let err = builtin(
            "bert-large",
            &BuildOptions {
                input_size: Some(vec![1024]),
                width: 1.0,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("exceed the model's 512 positions"), "{err}");
    }

    #[test]
    fn a_config_json_builds_and_bad_fields_are_named() {
        let json = r#"{"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768,
            "n_layer": 12, "n_head": 12, "n_positions": 1024, "n_ctx": 1024,
            "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"]}"#;
        let c = Config::from_json(json, "config.json").unwrap();
        // GPT-2 small: 124,439,808 parameters.
        assert_eq!(c.params(), 124_439_808);
        let g = build("gpt2", &c, 64, 1.0).unwrap();
        assert_eq!(cost(&g, 1, Precision::Fp32).params, 124_439_808);
        let e = Config::from_json(&json.replace("\"gpt2\"", "\"t5\""), "config.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("config.json") && e.contains("model_type"), "{e}");
        let e = Config::from_json(&json.replace("\"n_head\": 12", "\"n_head\": 7"), "c.json")
            .unwrap_err()
            .to_string();
        // Errors name the key the file gives (issue 43, item 21).
        assert!(
            e.contains("`n_head`") && e.contains("divide") && !e.contains("num_attention"),
            "{e}"
        );
        let e = Config::from_json(&json.replace("\"n_embd\": 768,", ""), "c.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("c.json") && e.contains("`n_embd`") && !e.contains("hidden_size"),
            "{e}"
        );
        let e = Config::from_json("{", "c.json").unwrap_err().to_string();
        assert!(e.contains("c.json"), "{e}");
    }

    /// BERT-base's `config.json` (google-bert/bert-base-uncased) with `architectures` and
    /// labels set as a fine-tuning run's file has them.
    fn bert_base(extra: &str) -> Config {
        let text = format!(
            r#"{{"model_type": "bert", "vocab_size": 30522, "hidden_size": 768,
            "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
            "max_position_embeddings": 512, "type_vocab_size": 2 {extra}}}"#
        );
        Config::from_json(&text, "bert-base.json").unwrap()
    }

    /// Issue 43, item 9: the head `architectures` names, with Hugging Face's parameter
    /// counts for BERT-base (uncased): `BertForSequenceClassification` with two labels
    /// 109,483,778, `BertForMaskedLM` 109,514,298, `BertForQuestionAnswering` 108,893,186,
    /// `BertForPreTraining` 110,106,428; the graph counts the same as the configuration.
    #[test]
    fn the_class_trained_sets_the_head() {
        for (extra, head, params) in [
            ("", Head::PreTraining, 110_106_428u64),
            (
                r#", "architectures": ["BertForPreTraining"]"#,
                Head::PreTraining,
                110_106_428,
            ),
            (
                r#", "architectures": ["BertForMaskedLM"]"#,
                Head::MaskedLm,
                109_514_298,
            ),
            (
                r#", "architectures": ["BertForSequenceClassification"]"#,
                Head::SequenceClassification,
                109_483_778,
            ),
            (
                r#", "architectures": ["BertForQuestionAnswering"]"#,
                Head::QuestionAnswering,
                108_893_186,
            ),
            // Nine classes from `id2label` (CoNLL-2003's tags).
            (
                r#", "architectures": ["BertForTokenClassification"], "id2label": {"0": "O",
                "1": "B-MISC", "2": "I-MISC", "3": "B-PER", "4": "I-PER", "5": "B-ORG",
                "6": "I-ORG", "7": "B-LOC", "8": "I-LOC"}"#,
                Head::TokenClassification,
                108_891_648 + 768 * 9 + 9,
            ),
        ] {
            let c = bert_base(extra);
            assert_eq!(c.head(), Some(head), "{extra}");
            assert_eq!(c.params(), params, "{extra}");
            let g = build("bert-base", &c, 128, 1.0).unwrap();
            assert_eq!(cost(&g, 1, Precision::Fp32).params, params, "{extra}");
        }
        let regression =
            bert_base(r#", "architectures": ["BertForSequenceClassification"], "num_labels": 1"#);
        let g = build("stsb", &regression, 128, 1.0).unwrap();
        assert!(matches!(g.layers().last().unwrap().op, Op::MseLoss));
    }

    /// Fine-tuning BERT-base for classification keeps no masked-LM logits: at 512 tokens
    /// and batch 32 they and their gradient are 30,522 x 512 x 32 x 4 bytes each, 2 GB.
    /// The footprint drops by more than that, and the class's own figures are refused
    /// when they contradict or are out of range.
    #[test]
    fn a_fine_tuning_head_keeps_no_language_model_logits() {
        use crate::memory::{Footprint, Optimizer};
        let at = |c: &Config| {
            let g = build("bert-base", c, 512, 1.0).unwrap();
            let f = Footprint::of(&g, Precision::Fp32, Optimizer::Adam);
            (f.activations_per_sample.value() + f.activation_gradients_per_sample.value()) * 32.0
        };
        let pretraining = at(&bert_base(""));
        let classifier = at(&bert_base(
            r#", "architectures": ["BertForSequenceClassification"]"#,
        ));
        let logits = 30_522.0 * 512.0 * 32.0 * 4.0;
        assert!(
            pretraining - classifier > 2.0 * logits,
            "{pretraining} against {classifier}"
        );
        let bad = |extra: &str| {
            let text = format!(
                r#"{{"model_type": "bert", "vocab_size": 30522, "hidden_size": 768,
                "num_hidden_layers": 12, "num_attention_heads": 12,
                "max_position_embeddings": 512 {extra}}}"#
            );
            Config::from_json(&text, "ft.json").unwrap_err().to_string()
        };
        for (extra, want) in [
            (
                r#", "architectures": ["BertForMultipleChoice"]"#,
                "BertForMultipleChoice",
            ),
            (
                r#", "architectures": ["GPT2LMHeadModel"]"#,
                "BertForSequenceClassification",
            ),
            (r#", "architectures": []"#, "architectures"),
            (r#", "num_labels": 0"#, "num_labels"),
            (
                r#", "num_labels": 3, "id2label": {"0": "a", "1": "b"}"#,
                "id2label",
            ),
            (r#", "id2label": [1, 2]"#, "id2label"),
            (r#", "classifier_dropout": 1.5"#, "classifier_dropout"),
            (r#", "problem_type": "ranking""#, "problem_type"),
        ] {
            let e = bad(extra);
            assert!(
                e.contains("ft.json") && e.contains(want),
                "want {want}: {e}"
            );
        }
    }

    /// Issue 43, items 15, 20 and 21: each family's defaults, its own keys, and the fields
    /// that would change the model.
    #[test]
    fn config_json_follows_each_familys_keys_and_defaults() {
        let bert = r#"{"model_type": "bert", "vocab_size": 30522, "hidden_size": 1024,
            "num_hidden_layers": 24, "num_attention_heads": 16,
            "max_position_embeddings": 512, "transformers_version": "4.40"}"#;
        // BertConfig's defaults: a feed-forward of 3072 (not 4 x 1024), 2 token types.
        let c = Config::from_json(bert, "bert.json").unwrap();
        assert_eq!((c.ffn(), c.type_vocab_size), (3072, Some(2)));
        assert_eq!(c.hidden_act.as_deref(), Some("gelu"));
        let opt = r#"{"model_type": "opt", "vocab_size": 50272, "hidden_size": 2048,
            "num_hidden_layers": 24, "num_attention_heads": 32,
            "max_position_embeddings": 2048}"#;
        let c = Config::from_json(opt, "opt.json").unwrap();
        assert_eq!(c.ffn(), 3072);
        assert_eq!(c.hidden_act.as_deref(), Some("relu"));
        let gpt2 = r#"{"model_type": "gpt2", "vocab_size": 50257, "n_embd": 1024,
            "n_layer": 24, "n_head": 16, "n_positions": 1024}"#;
        assert_eq!(Config::from_json(gpt2, "g.json").unwrap().ffn(), 4096);
        // GPT2Config's attribute map takes `hidden_size` for `n_embd`; both must agree.
        let both = gpt2.replace(
            "\"n_embd\": 1024,",
            "\"n_embd\": 1024, \"hidden_size\": 768,",
        );
        let e = Config::from_json(&both, "g.json").unwrap_err().to_string();
        assert!(e.contains("n_embd") && e.contains("hidden_size"), "{e}");
        let cases = [
            // Another family's key, which Hugging Face ignores for this one.
            (
                bert.replace("\"vocab_size\"", "\"n_inner\": 4096, \"vocab_size\""),
                "`n_inner`",
            ),
            (
                gpt2.replace("\"vocab_size\"", "\"ffn_dim\": 4096, \"vocab_size\""),
                "`ffn_dim`",
            ),
            (
                opt.replace(
                    "\"vocab_size\"",
                    "\"intermediate_size\": 8192, \"vocab_size\"",
                ),
                "`intermediate_size`",
            ),
            // A field that changes the model.
            (
                bert.replace(
                    "\"vocab_size\"",
                    "\"position_embedding_type\": \"relative_key\", \"vocab_size\"",
                ),
                "position_embedding_type",
            ),
            (
                opt.replace("\"vocab_size\"", "\"enable_bias\": false, \"vocab_size\""),
                "enable_bias",
            ),
            // Sizes that wrap or overflow (item 15).
            (
                bert.replace(
                    "\"vocab_size\"",
                    "\"type_vocab_size\": 18446744073709551615, \"vocab_size\"",
                ),
                "type_vocab_size",
            ),
            (
                bert.replace("\"vocab_size\"", "\"type_vocab_size\": 0, \"vocab_size\""),
                "type_vocab_size",
            ),
            // A required size missing, named by the family's key.
            (
                opt.replace("\"num_attention_heads\": 32,", ""),
                "`num_attention_heads`",
            ),
            (gpt2.replace("\"n_layer\": 24,", ""), "`n_layer`"),
            // Sizes whose products overflow: refused, not wrapped (a fuzz case panicked).
            (
                gpt2.replace("\"n_embd\": 1024", "\"n_embd\": 18446744073709551615"),
                "n_embd",
            ),
            (
                gpt2.replace("\"n_layer\": 24", "\"n_layer\": 4194304")
                    .replace("\"n_embd\": 1024", "\"n_embd\": 4096"),
                "parameters",
            ),
            (String::from("[1, 2]"), "model_type"),
            (String::from("{\"model_type\": 3}"), "model_type"),
        ];
        for (text, want) in cases {
            let e = Config::from_json(&text, "c.json").unwrap_err().to_string();
            assert!(e.contains("c.json") && e.contains(want), "want {want}: {e}");
        }
    }

    /// The published configurations of Llama's families (`tests/fixtures/hf/`).
    const LLAMA_FILES: [(&str, &str, u64); 3] = [
        (
            "llama-2-7b.json",
            include_str!("../../../tests/fixtures/hf/llama-2-7b.json"),
            6_738_415_616,
        ),
        (
            "mistral-7b.json",
            include_str!("../../../tests/fixtures/hf/mistral-7b.json"),
            7_241_732_096,
        ),
        (
            "qwen2-7b.json",
            include_str!("../../../tests/fixtures/hf/qwen2-7b.json"),
            7_615_616_512,
        ),
    ];

    /// Llama 2 7B, Mistral 7B, Qwen2 7B and the built-in Llama 3 8B and 70B: Hugging Face's
    /// parameter counts to the unit, in the configuration's count and the graph's.
    #[test]
    fn llama_families_count_hugging_face_s_parameters() {
        for (file, text, params) in LLAMA_FILES {
            let c = Config::from_json(text, file).unwrap();
            assert_eq!(c.params(), params, "{file}");
            let g = build(file, &c, 16, 1.0).unwrap();
            assert_eq!(cost(&g, 1, Precision::Fp32).params, params, "{file}");
        }
        let short = BuildOptions {
            input_size: Some(vec![16]),
            width: 1.0,
        };
        for (name, params) in [
            ("llama3-8b", 8_030_261_248u64),
            ("llama3-70b", 70_553_706_496),
        ] {
            let g = builtin(name, &short).unwrap();
            assert_eq!(cost(&g, 1, Precision::Fp32).params, params, "{name}");
            let b = crate::workloads::find(name).unwrap();
            assert_eq!(b.transformer_config().unwrap().params(), params, "{name}");
        }
        // Llama 3 8B's attention: 32 query heads of 128 channels over 8 key and value
        // heads, both rotated, after projections without biases.
        let g = builtin("llama3-8b", &short).unwrap();
        let layer = |name: &str| &g.layers()[g.find(name).unwrap()];
        let Op::Attention(a) = layer("model.layers.0.self_attn.attention").op else {
            panic!("no attention");
        };
        assert_eq!((a.heads, a.kv_heads, a.fused), (32, 8, false));
        assert_eq!(
            layer("model.layers.0.self_attn.k_proj").op,
            linear_with(1024, false)
        );
        assert_eq!(
            layer("model.layers.0.self_attn.k_rotary").op,
            Op::Rotary {
                heads: 8,
                theta: 500_000.0
            }
        );
        assert!(matches!(
            layer("lm_head").op,
            Op::Linear {
                tied: false,
                bias: false,
                ..
            }
        ));
        assert_eq!(block_of("model.layers.31.mlp.down_proj"), Some(31));
    }

    /// Llama 3 8B's training FLOPs: its linear layers' are exactly `6 T N`, `N` the
    /// parameters less the embedding table (a lookup) and the norms' scales; with
    /// attention's products (`12 L S H T`) and the five element-wise kernels on each
    /// head's weights (scale, mask, softmax forward; softmax's and the scale's backward),
    /// the whole step is within 0.1 % (the norms, SiLU, the gate's product, rotary
    /// embeddings and residuals are the rest).
    #[test]
    fn llama_training_flops_are_six_n_t_plus_attention() {
        let b = crate::workloads::find("llama3-8b").unwrap();
        let config = b.transformer_config().unwrap();
        let (v, h, l) = (
            config.vocab_size as f64,
            config.hidden_size as f64,
            config.num_hidden_layers as f64,
        );
        let heads = config.num_attention_heads as f64;
        let norms = l * 2.0 * h + h;
        let n = config.params() as f64 - v * h - norms;
        for (seq, batch) in [(128usize, 2u64), (2048, 1)] {
            let options = BuildOptions {
                input_size: Some(vec![seq]),
                width: 1.0,
            };
            let g = builtin("llama3-8b", &options).unwrap();
            let c = cost(&g, batch, Precision::Fp32);
            let s = seq as f64;
            let t = s * batch as f64;
            let linear = linear_flops(&c);
            assert!((linear / (6.0 * n * t) - 1.0).abs() < 1e-12, "{linear}");
            let analytic = 6.0 * n * t + 12.0 * l * s * h * t + 5.0 * l * heads * s * t;
            let total = c.flops_train.value();
            assert!(
                (total / analytic - 1.0).abs() < 1e-3,
                "seq {seq}: {total} vs {analytic}"
            );
        }
    }

    /// What Llama's families cannot be: key and value heads that do not divide the
    /// heads, odd heads (rotary pairs), a rotary base at or below 1, an unknown
    /// activation, a tensor-parallel split of the key and value heads that does not divide.
    #[test]
    fn llama_configurations_refuse_what_cannot_be_built() {
        let (file, text, _) = LLAMA_FILES[1];
        for (key, value, want) in [
            (
                "num_key_value_heads",
                serde_json::json!(5),
                "num_key_value_heads",
            ),
            (
                "num_key_value_heads",
                serde_json::json!(0),
                "num_key_value_heads",
            ),
            ("head_dim", serde_json::json!(127), "head_dim"),
            ("rope_theta", serde_json::json!(0.5), "rope_theta"),
            ("hidden_act", serde_json::json!("swish"), "hidden_act"),
            // 32 heads of 129 channels.
            (
                "hidden_size",
                serde_json::json!(4128),
                "num_attention_heads",
            ),
        ] {
            let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
            v[key] = value;
            let e = Config::from_json(&v.to_string(), file)
                .unwrap_err()
                .to_string();
            assert!(e.contains(file) && e.contains(want), "{key}: {e}");
        }
        let c = Config::from_json(text, file).unwrap();
        let e = build_split("m", &c, 16, 1.0, 16).unwrap_err();
        assert!(e.message.contains("8 key and value heads"), "{}", e.message);
        assert!(build_split("m", &c, 16, 1.0, 8).is_ok());
    }

    const MIXTRAL: &str = include_str!("../../../tests/fixtures/hf/mixtral-8x7b.json");

    /// Mixtral 8x7B from its `config.json` and built in: Hugging Face's 46,702,792,704
    /// parameters, in the configuration's count and the graph's, and under expert
    /// parallelism each rank's share of the experts with the router whole.
    #[test]
    fn mixtral_counts_hugging_face_s_parameters() {
        let c = Config::from_json(MIXTRAL, "mixtral-8x7b.json").unwrap();
        assert_eq!(c.experts(), Some((8, 2)));
        assert_eq!(c.params(), 46_702_792_704);
        let g = build("mixtral", &c, 16, 1.0).unwrap();
        assert_eq!(cost(&g, 1, Precision::Fp32).params, 46_702_792_704);
        let short = BuildOptions {
            input_size: Some(vec![16]),
            width: 1.0,
        };
        let g = builtin("mixtral-8x7b", &short).unwrap();
        assert_eq!(cost(&g, 1, Precision::Fp32).params, 46_702_792_704);
        let layer = &g.layers()[g.find("model.layers.3.block_sparse_moe").unwrap()];
        let Op::Moe(m) = layer.op else {
            panic!("no mixture of experts");
        };
        assert_eq!(
            (
                m.experts,
                m.local,
                m.top_k,
                m.ffn,
                m.gated,
                m.capacity_factor
            ),
            (8, 8, 2, 14336, true, None)
        );
        // Four expert-parallel ranks hold two experts of each layer each.
        let per_layer_experts = 8 * 3 * 4096 * 14336u64;
        let split = build_parallel("mixtral", &c, 16, 1.0, 1, 4).unwrap();
        let p = cost(&split, 1, Precision::Fp32).params;
        assert_eq!(46_702_792_704 - p, 32 * per_layer_experts * 3 / 4);
        assert!(build_parallel("mixtral", &c, 16, 1.0, 1, 3).is_err());
        let llama = Config::from_json(LLAMA_FILES[0].1, "llama.json").unwrap();
        let e = build_parallel("llama", &llama, 16, 1.0, 1, 2).unwrap_err();
        assert!(e.message.contains("has none"), "{}", e.message);
    }

    /// Mixtral's training FLOPs are `6 T N_active` for its projections (the parameters a
    /// token uses: attention, the router, two experts of each layer and the head; Jiang et
    /// al. count 12.9 billion active with the embeddings) plus attention's products, within
    /// 0.1 %; dropless routing computes each token twice, a capacity factor of 1.25 computes
    /// 1.25 times the routed slots.
    #[test]
    fn mixtral_training_flops_are_six_n_active_t_plus_attention() {
        let c = Config::from_json(MIXTRAL, "mixtral-8x7b.json").unwrap();
        let (v, h, l, f) = (
            c.vocab_size as f64,
            c.hidden_size as f64,
            c.num_hidden_layers as f64,
            c.ffn() as f64,
        );
        let kv = (c.kv_heads() * c.head_size()) as f64;
        let attention = 2.0 * h * h + 2.0 * h * kv;
        let active = l * (attention + 8.0 * h + 2.0 * 3.0 * h * f) + v * h;
        assert!((active + v * h) / 12.9e9 - 1.0 < 0.01, "{active}");
        let seq = 256usize;
        let g = build("mixtral", &c, seq, 1.0).unwrap();
        let cost_of = |g: &Graph| cost(g, 1, Precision::AmpBf16).flops_train.value();
        let t = seq as f64;
        let heads = c.num_attention_heads as f64;
        let analytic = 6.0 * active * t + 12.0 * l * t * h * t + 5.0 * l * heads * t * t;
        let total = cost_of(&g);
        assert!(
            (total / analytic - 1.0).abs() < 1e-3,
            "{total} vs {analytic}"
        );
        // With a capacity of 1.25 the experts compute 1.25 x the routed slots.
        let capped = Config {
            capacity_factor: Some(1.25),
            ..c.clone()
        };
        let g = build("mixtral", &capped, seq, 1.0).unwrap();
        let experts = 6.0 * l * 2.0 * 3.0 * h * f * t;
        let more = cost_of(&g) - total;
        assert!((more / (0.25 * experts) - 1.0).abs() < 1e-3, "{more}");
    }

    /// What a Mixtral configuration cannot be: no experts, more experts a token than there
    /// are, a router option that changes the step, a capacity on a dense model.
    #[test]
    fn mixtral_configurations_refuse_what_cannot_be_built() {
        for (key, value, want) in [
            (
                "num_local_experts",
                serde_json::json!(0),
                "num_local_experts",
            ),
            (
                "num_experts_per_tok",
                serde_json::json!(9),
                "num_experts_per_tok",
            ),
            (
                "output_router_logits",
                serde_json::json!(true),
                "output_router_logits",
            ),
        ] {
            let mut v: serde_json::Value = serde_json::from_str(MIXTRAL).unwrap();
            v[key] = value;
            let e = Config::from_json(&v.to_string(), "mixtral.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains("mixtral.json") && e.contains(want), "{key}: {e}");
        }
        let dense = include_str!("../../../data/catalog/transformers/llama3-8b.config.toml")
            .replace(
                "tie_word_embeddings",
                "capacity_factor = 1.0\ntie_word_embeddings",
            );
        let e = Config::from_toml(&dense, "llama.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("capacity_factor"), "{e}");
    }
}
