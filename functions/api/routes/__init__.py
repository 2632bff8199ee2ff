"""The Api's route groups (Powertools ``Router``s included by ``api.app``)."""
