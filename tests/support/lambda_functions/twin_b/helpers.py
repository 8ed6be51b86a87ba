TWIN = "b"
