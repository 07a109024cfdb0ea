"""The file ms-swift imports: `swift sft --external_plugins <this file> --loss_type smmd` (see `ms_swift`)."""

from vlm_smmd.integrations.ms_swift import register

register()
