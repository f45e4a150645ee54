"""Hand-written handlers: one function per spec operation, named by its operationId.

`generated/routes.py` calls `handlers.<operation_id in snake_case>`; a missing
one is an error at generation and at import, never at request time.
"""

from handlers.anthropic_messages import count_message_tokens, create_message
from handlers.audio.transcriptions import create_transcription, create_translation
from handlers.banner import get_banner
from handlers.config import get_config, get_config_origins, list_config_fields, update_config
from handlers.decisions import decide, decide_alias
from handlers.docs import get_api_root, get_docs, get_docs_asset, get_openapi_document
from handlers.embeddings import create_embedding
from handlers.health import get_health
from handlers.lora_adapters import list_lora_adapters, load_lora_adapter, unload_lora_adapter
from handlers.metrics import get_metrics, get_prometheus_metrics
from handlers.model_list import list_models, retrieve_model
from handlers.models_folder import cancel_download, list_catalog, remove_model, start_download, switch_model
from handlers.openai_chat import create_chat_completion
from handlers.openai_completions import create_completion
from handlers.openai_responses import count_response_input_tokens, create_response, open_responses_socket
from handlers.rerank import create_rerank, create_rerank_unversioned, create_rerank_v2
from handlers.stored_responses import delete_response, get_response, list_input_items
from handlers.tokens import detokenize, detokenize_root, get_tokenizer_info, tokenize, tokenize_root
from handlers.ui import get_ui, get_ui_asset, get_ui_metrics

__all__ = [
    "cancel_download",
    "count_message_tokens",
    "count_response_input_tokens",
    "create_chat_completion",
    "create_completion",
    "create_embedding",
    "create_message",
    "create_rerank",
    "create_rerank_unversioned",
    "create_rerank_v2",
    "create_response",
    "create_transcription",
    "create_translation",
    "delete_response",
    "decide",
    "decide_alias",
    "detokenize",
    "detokenize_root",
    "get_api_root",
    "get_banner",
    "get_config",
    "get_config_origins",
    "get_docs",
    "get_docs_asset",
    "get_health",
    "get_metrics",
    "get_openapi_document",
    "get_prometheus_metrics",
    "get_response",
    "get_tokenizer_info",
    "get_ui",
    "get_ui_asset",
    "get_ui_metrics",
    "list_catalog",
    "list_config_fields",
    "list_input_items",
    "list_lora_adapters",
    "list_models",
    "open_responses_socket",
    "load_lora_adapter",
    "remove_model",
    "retrieve_model",
    "start_download",
    "switch_model",
    "tokenize",
    "tokenize_root",
    "unload_lora_adapter",
    "update_config",
]
