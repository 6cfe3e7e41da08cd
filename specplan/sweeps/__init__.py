"""Many runs: sweep specs, resumable records, local and Ray runners, the recommender, engine exports."""
